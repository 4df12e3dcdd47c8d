"""Every program OpenForge runs inside a sandbox, and the one convention they follow.

:data:`PROGRAMS` lists them by path under ``src/openforge`` (a path string, never an import,
so this package depends on nothing above it). The convention:

1. **Shipped as one zipapp per program.** :func:`bundle` builds a deterministic ZIP_STORED
   archive (fixed timestamps, sorted entries) holding ``__main__.py``, which calls the
   program's ``main``; empty ``__init__.py`` stubs for the program's packages;
   ``openforge/guest/common.py``; and the program at its dotted path. ``python3 -I x.pyz``
   puts the archive on ``sys.path[0]``, so ``from openforge.guest.common import …`` resolves
   inside the sandbox as it does on the host, in mypy and in tests. Callers put it in the
   sandbox as ``<name>.pyz`` (a harness's agent, an environment's server, a task's
   ``osworld_eval``); the task's own verifiers are never rewritten.
2. **Entry point**: ``main(argv) -> int`` and ``sys.exit(main(...))``; always run with ``-I``
   (:func:`command`), so nothing of the sandbox's ``PYTHON*`` environment or working
   directory reaches it. Sources parse on Python 3.8 (ruff checks that target for guest/).
3. **Arguments**: argparse flags for paths and limits; model endpoints default from the
   environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENFORGE_MODEL``); request/response
   programs read one JSON request on stdin.
4. **Where it writes**: only to paths given as arguments (``--transcript``, ``--result``,
   ``--port-file``), each written whole (``common.write_text``); stdout carries at most one
   JSON result line, stderr ``"<prog>: …"``. Exit codes are named in :mod:`.common` (agents:
   2 out of steps, 3 model API, 4 environment gone; graders' children: 3 needs a judge,
   4 judge failed).
5. **Imports**: the standard library, :mod:`openforge.guest.common` and the program's own
   declared third-party packages (:data:`THIRD_PARTY`); ``tests/guest`` checks this.

Two exceptions stay plain files: ``gateway_forwarder`` (bind-mounted and started with
``-I -S`` on every exec, so it imports nothing) and ``openforge_verify`` (task verifiers
``import openforge_verify`` beside them). Neither imports :mod:`.common`. sandboxd is not a
guest program here: it runs from the sandbox image's installed package and shares
``sandboxes/procs.py`` and ``fspaths.py`` with the local backend; ``verifier_python`` (the
``python3`` a verifier runs) is a plain file too and stays beside it, since the image ships
it with sandboxd.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

__all__ = [
    "HOST_CHILDREN",
    "LIBRARIES",
    "PLAIN",
    "PROGRAMS",
    "THIRD_PARTY",
    "bundle",
    "command",
    "source",
]

_SRC = Path(__file__).resolve().parents[1]  # src/openforge

# Every program run inside a sandbox: name -> path under src/openforge.
PROGRAMS: dict[str, str] = {
    "claw_agent": "guest/claw_agent.py",
    "browser_agent": "guest/browser_agent.py",
    "computer_agent": "guest/computer_agent.py",
    "browser_use_runner": "guest/browser_use_runner.py",
    "browser_server": "guest/browser_server.py",
    "desktop_server": "guest/desktop_server.py",
    "mcp_bridge": "guest/mcp_bridge.py",
    "supervisor": "guest/supervisor.py",
    "gateway_forwarder": "guest/gateway_forwarder.py",
    # Shipped in the sandbox image beside sandboxd, so it stays with it (docstring).
    "verifier_python": "sandboxes/verifier_python.py",
    "webapps_server": "suites/webapps/server.py",
    "osworld_eval": "suites/osworld/evaluate.py",
}
# Imported by task verifiers, never run on their own.
LIBRARIES: dict[str, str] = {"openforge_verify": "guest/openforge_verify.py"}
# Run on the host, not in a sandbox, by a suite's grader (with the user's checkout on
# PYTHONPATH): the same I/O convention (one JSON request on stdin, one JSON line out), and
# the same imports rule, common included, which the host's installed openforge provides.
HOST_CHILDREN: dict[str, str] = {
    "claweval_grade": "suites/claweval/grade_child.py",
    "qwenclawbench_grade": "suites/qwenclawbench/grade_child.py",
}
# Shipped as the plain file, importing nothing of OpenForge (the docstring's exceptions).
PLAIN = frozenset({"gateway_forwarder", "openforge_verify", "verifier_python"})
# The third-party packages each program may import besides the standard library.
THIRD_PARTY: dict[str, frozenset[str]] = {
    "browser_server": frozenset({"playwright"}),
    "desktop_server": frozenset({"pyautogui", "PIL", "Xlib"}),
    "mcp_bridge": frozenset({"mcp", "anyio"}),
    "browser_use_runner": frozenset({"browser_use"}),
    "claweval_grade": frozenset({"claw_eval"}),
    "qwenclawbench_grade": frozenset({"lib_grading", "lib_tasks"}),
}

# Every entry's timestamp: the bundle's bytes depend on its sources only.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def source(name: str) -> Path:
    """The source file of program, library or host child ``name`` (path arithmetic, never an
    import)."""
    rel = PROGRAMS.get(name) or LIBRARIES.get(name) or HOST_CHILDREN.get(name)
    if rel is None:
        raise KeyError(f"no guest program named {name!r}")
    return _SRC / rel


def _module(rel: str) -> str:
    return "openforge." + rel[: -len(".py")].replace("/", ".")


def _entry(zf: zipfile.ZipFile, arcname: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    zf.writestr(info, data, compress_type=zipfile.ZIP_STORED)


@functools.lru_cache(maxsize=64)
def bundle(name: str, replace: bytes | None = None) -> bytes:
    """Program ``name`` as a zipapp run with ``python3 -I``: the same bytes for the same sources.

    ``replace`` stands in for the program's own source (a test's edited agent).
    """
    if name not in PROGRAMS:
        raise KeyError(f"no guest program named {name!r}")
    rel = PROGRAMS[name]
    program = replace if replace is not None else source(name).read_bytes()
    parts = ("openforge", *rel.split("/"))
    files = {
        "__main__.py": (
            f"import sys\nfrom {_module(rel)} import main\nsys.exit(main(sys.argv[1:]))\n"
        ).encode(),
        "openforge/guest/common.py": (_SRC / "guest" / "common.py").read_bytes(),
        "/".join(parts): program,
    }
    for depth in range(1, len(parts)):
        files.setdefault("/".join((*parts[:depth], "__init__.py")), b"")
    files.setdefault("openforge/guest/__init__.py", b"")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for arcname in sorted(files):
            _entry(zf, arcname, files[arcname])
    return out.getvalue()


def command(python: str, path: str, *args: str) -> list[str]:
    """The argv that runs a shipped program: isolated mode, so the sandbox's env stays out."""
    return [python, "-I", path, *args]
