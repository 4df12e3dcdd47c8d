"""MiniWoB++: task directories holding ``miniwob.toml`` (``loader.py``), and the bundled
``miniwob`` suite generated from the wheel's tasks on first use."""

from __future__ import annotations

from openforge.suites.miniwob.loader import MINIWOB_FILE, MINIWOB_SUITE, load_miniwob, miniwob_suite
from openforge.suites.suite import Suite, TaskDirs, holds

__all__ = ["SUITE"]

SUITE = Suite(
    name=MINIWOB_SUITE,
    formats=("miniwob",),
    task_dirs=TaskDirs(claims=holds(MINIWOB_FILE), load=load_miniwob),
    bundled=miniwob_suite,
)
