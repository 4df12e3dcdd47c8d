"""Harbor's task format and Terminal-Bench 1's (``loader.py``): one task directory each,
verified by the task's own tests in its own image."""

from __future__ import annotations

import tomllib
from pathlib import Path

from openforge.suites.harbor.loader import load_harbor, load_terminal_bench
from openforge.suites.suite import Suite, TaskDirs, holds

__all__ = ["HARBOR", "TERMINAL_BENCH"]


# Tables and directories only a Harbor task has; a task.toml with one of them (and no
# native ``id``) is read as Harbor, so its loader can say which Harbor file is missing.
_HARBOR_KEYS = frozenset(
    ("schema_version", "version", "task", "metadata", "agent", "verifier", "environment",
     "solution", "steps", "source", "artifacts", "multi_step_reward_strategy")
)  # fmt: skip


def _is_harbor(d: Path) -> bool:
    """True for a directory whose task.toml is Harbor's rather than OpenForge's own."""
    if not (d / "task.toml").is_file():
        return False
    try:
        data = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
        return False  # the native loader reports why it cannot be read
    if "id" in data:
        return False
    harbor_dirs = any((d / sub).is_dir() for sub in ("tests", "environment", "steps"))
    return harbor_dirs or (d / "instruction.md").is_file() or bool(_HARBOR_KEYS & data.keys())


HARBOR = Suite(
    name="harbor", formats=("harbor",), task_dirs=TaskDirs(claims=_is_harbor, load=load_harbor)
)
TERMINAL_BENCH = Suite(
    name="terminal-bench",
    formats=("terminal-bench",),
    task_dirs=TaskDirs(claims=holds("task.yaml"), load=load_terminal_bench),
)
