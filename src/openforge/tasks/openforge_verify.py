"""Helpers every OpenForge verifier may import: ``from openforge_verify import …``.

The verifier runner puts this file beside each task's verifier (in the verify directory,
``$OPENFORGE_VERIFY_DIR``), so a verifier script stays a plain standard-library Python
file that runs on whatever Python 3 the sandbox has. Paths are relative to the workspace
(the verifier's working directory); ``pristine`` reads the task's own untouched copy of
its input data from ``verify/data/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, NoReturn

V = os.environ.get("OPENFORGE_VERIFY_DIR", os.path.dirname(os.path.abspath(__file__)))


def done(ok: bool, **details: Any) -> NoReturn:
    """Print the reward line (1 when ``ok``) with ``details`` and exit."""
    print(json.dumps({"reward": 1.0 if ok else 0.0, "details": details}))
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
