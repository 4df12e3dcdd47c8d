"""OpenForge's own task format: a directory holding ``task.toml`` (``tasks/native.py``), with
its GUI sections, ``[browser]`` and ``[desktop]`` (``suites/native_gui.py``)."""

from __future__ import annotations

from openforge.suites.native_gui import load_native_task
from openforge.suites.suite import Suite, TaskDirs, holds

__all__ = ["NATIVE"]

# After Harbor in the catalog: a task.toml that is Harbor's is claimed there first.
NATIVE = Suite(
    name="native", formats=("native",), task_dirs=TaskDirs(holds("task.toml"), load_native_task)
)
