"""Helpers every OpenForge verifier may import: ``from openforge_verify import …``.

The verifier runner puts this file beside each task's verifier (in the verify directory,
``$OPENFORGE_VERIFY_DIR``), so a verifier script stays a plain standard-library Python
file that runs on whatever Python 3 the sandbox has. Paths are relative to the workspace
(the verifier's working directory); ``pristine`` reads the task's own untouched copy of
its input data from ``verify/data/``.

The reward goes to the channel the runner opened (``$OPENFORGE_REWARD_CHANNEL``, a FIFO):
this module opens it when imported, before the verifier can run anything of the agent's,
removes its name so that no later process can open it, and makes this process undumpable
so that a child of the same uid cannot reach its descriptors through /proc. The line is
printed on stdout too, for people reading the log (and for runners without a channel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, NoReturn

V = os.environ.get("OPENFORGE_VERIFY_DIR", os.path.dirname(os.path.abspath(__file__)))
_DETAILS_MAX = 64 * 1024  # characters of details sent; the agent's content may be huge


def _undumpable() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError, ImportError):
        pass


def _open_channel() -> int | None:
    path = os.environ.pop("OPENFORGE_REWARD_CHANNEL", None)
    if not path:
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # taken (or no runner reading): the runner sees nothing from us
    try:
        os.unlink(path)  # no later process can open it now
    except OSError:
        os.close(fd)  # others could open it too: not a channel of ours
        return None
    os.set_blocking(fd, True)
    _undumpable()
    os.write(fd, b'{"openforge_verify": 1}\n')
    return fd


_CHANNEL = _open_channel()


def done(ok: bool, **details: Any) -> NoReturn:
    """Send the reward line (1 when ``ok``) with ``details`` and exit."""
    line = json.dumps({"reward": 1.0 if ok else 0.0, "details": details})
    if len(line) > _DETAILS_MAX:
        line = json.dumps({"reward": 1.0 if ok else 0.0, "details": {"truncated": line[:4096]}})
    if _CHANNEL is not None:
        os.write(_CHANNEL, line.encode() + b"\n")
    print(line)
    sys.exit(0)


def read(path: str) -> str | None:
    """A workspace file's text, or None when it is missing or not UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def pristine(name: str) -> str:
    """The untouched copy of the task's input ``name`` (from ``verify/data/``)."""
    with open(os.path.join(V, "data", name), encoding="utf-8") as f:
        return f.read()


def run(argv: list[str], stdin: str | None = None) -> tuple[int | None, str]:
    """Run ``argv`` (20 s limit); (exit code, stdout), or (None, error text)."""
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return p.returncode, p.stdout
