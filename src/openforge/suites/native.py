"""OpenForge's own task format: a directory holding ``task.toml`` (``tasks/native.py``)."""

from __future__ import annotations

from openforge.suites.suite import Suite, TaskDirs, holds
from openforge.tasks.native import load_native

__all__ = ["NATIVE"]

# After Harbor in the catalog: a task.toml that is Harbor's is claimed there first.
NATIVE = Suite(
    name="native", formats=("native",), task_dirs=TaskDirs(holds("task.toml"), load_native)
)
