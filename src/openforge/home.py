"""The per-user directory OpenForge keeps its caches and secrets in.

One root, resolved from the user's environment at call time (never a path of one machine):
``$OPENFORGE_HOME`` when set, else ``$XDG_CACHE_HOME/openforge``, else ``~/.cache/openforge``
with ``~`` taken from ``$HOME``. Models, generated task suites and the gateway's admin token
live under it; each also has its own override (``$OPENFORGE_MODELS_DIR``,
``$OPENFORGE_ADMIN_TOKEN``, ...).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["admin_token_path", "ensure_admin_token", "openforge_home", "read_admin_token"]


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


def admin_token_path() -> Path:
    """Where ``openforge gateway`` keeps its generated admin token when none is given."""
    return openforge_home() / "admin-token"


def read_admin_token() -> str | None:
    """``$OPENFORGE_ADMIN_TOKEN``, else the stored token file's content, else None."""
    env = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    if env:
        return env
    try:
        return admin_token_path().read_text().strip() or None
    except OSError:
        return None


def ensure_admin_token() -> str:
    """The admin token to enforce: the configured one, else one generated and stored once.

    The file is created with owner-only permissions (0600, in a 0700 directory) and never
    overwritten, so every later gateway, orchestrator and trainer of this user reads the
    same token; an agent in a sandbox, another user, has no way to read it.
    """
    found = read_admin_token()
    if found:
        return found
    path = admin_token_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process won the race: use its token
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token
