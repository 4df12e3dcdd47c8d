"""Where generated suites (claw-drill, miniwob, webapps) are written on first use."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from openforge.home import openforge_home

__all__ = ["cached_suite", "tasks_cache_dir"]


def tasks_cache_dir() -> Path:
    """Where generated suites are cached (``$OPENFORGE_TASKS_DIR``, as models_dir() does)."""
    env = os.environ.get("OPENFORGE_TASKS_DIR")
    return Path(env).expanduser() if env else openforge_home() / "tasks"


def cached_suite(name: str, generate: Callable[[Path], object]) -> Path:
    """The generated suite ``name`` under :func:`tasks_cache_dir`, made by ``generate`` on
    first use.

    It is written to a temporary directory beside it and renamed into place, so concurrent
    loaders never see half a suite; the loser of a race drops its copy and uses the winner's.
    """
    root = tasks_cache_dir() / name
    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        generate(tmp)
        tmp.chmod(0o755)
        try:
            tmp.rename(root)
        except OSError:
            if not root.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
