"""OpenForge's in-sandbox runtime (sandboxd) inside a task's own image, left unedited.

The sandbox image (``deploy/build-sandbox-image.sh``: a rootfs with Python 3.11 and sandboxd)
is mounted read-only at :data:`RT_DIR` — podman's ``--mount type=image``, a Kubernetes image
volume — and sandboxd is started with that rootfs's own dynamic loader and libraries, so the
task's image needs no Python and no library of the right version, and the commands sandboxd
runs see only the task's own system (no ``LD_LIBRARY_PATH`` or ``PYTHON*`` is set for them).

A harness that needs Python in a task image without one (the built-in claw agent:
``-O python=/opt/openforge/rt/opt/openforge/bin/python3``) uses :data:`RT_PYTHON`, a script the
sandbox image carries that starts the same interpreter the same way. It is never on
``PATH``: the task's environment stays the task's.
"""

from __future__ import annotations

from openforge.guest.common import SANDBOX_HOME, SANDBOX_WORKDIR

__all__ = [
    "RT_DIR",
    "RT_ENTRYPOINT",
    "RT_PYTHON",
    "SANDBOX_HOME",
    "SANDBOX_WORKDIR",
    "python_wrapper",
]

RT_DIR = "/opt/openforge/rt"
RT_ENTRYPOINT = [
    f"{RT_DIR}/usr/lib64/ld-linux-x86-64.so.2",  # x86-64 hosts (the sandbox image's arch)
    "--library-path", f"{RT_DIR}/usr/lib/x86_64-linux-gnu:{RT_DIR}/usr/lib",
    f"{RT_DIR}/usr/bin/python3.11", "-I", "-c",
    # -I: no PYTHON* variable of the task's image reaches this interpreter.
    f"import sys, runpy; sys.path[:0] = ['{RT_DIR}/opt/openforge/site']; "
    "runpy.run_module('openforge.sandboxes.sandboxd', run_name='__main__', alter_sys=True)",
]  # fmt: skip

# The script's place in the sandbox image, and where a task's container sees it.
PYTHON_WRAPPER = "/opt/openforge/bin/python3"
RT_PYTHON = RT_DIR + PYTHON_WRAPPER


def python_wrapper() -> str:
    """The ``python3`` script the sandbox image carries (``deploy/build-sandbox-image.sh``)."""
    loader, flag, libs, python = RT_ENTRYPOINT[:4]
    return (
        "#!/bin/sh\n# OpenForge's runtime Python, for harnesses in a task image without one.\n"
        f'exec {loader} {flag} {libs} {python} "$@"\n'
    )
