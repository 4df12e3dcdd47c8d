"""The per-user directory OpenForge keeps its caches and secrets in.

One root, resolved from the user's environment at call time (never a path of one machine):
``$OPENFORGE_HOME`` when set, else ``$XDG_CACHE_HOME/openforge``, else ``~/.cache/openforge``
with ``~`` taken from ``$HOME``. Models, generated task suites and the gateway's admin token
live under it; each also has its own override (``$OPENFORGE_MODELS_DIR``, ...).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["openforge_home"]


def openforge_home() -> Path:
    """The root directory of this user's OpenForge caches (it may not exist yet)."""
    env = os.environ.get("OPENFORGE_HOME")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "openforge"
    return Path.home() / ".cache" / "openforge"
