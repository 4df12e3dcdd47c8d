"""The suites OpenForge loads, in a fixed order.

The order is part of the contract: a directory is the task of the first suite whose
``task_dirs`` claims it, and a checkout given without ``KIND:`` is the first suite that
recognises it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from openforge.suites import claw_mini, claweval, drills, miniwob, qwenclawbench, webapps
from openforge.suites.suite import Checkout, Suite, TaskDirs, holds
from openforge.tasks import harbor, osworld, webjudge
from openforge.tasks.native import load_native

__all__ = ["BY_NAME", "SUITES", "SUITE_SPLITS", "TERMINAL_BENCH"]


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


TERMINAL_BENCH = Suite(
    name="terminal-bench",
    formats=("terminal-bench",),
    task_dirs=TaskDirs(claims=holds("task.yaml"), load=harbor.load_terminal_bench),
)

SUITES: tuple[Suite, ...] = (
    miniwob.SUITE,
    webapps.SUITE,
    Suite(
        name="harbor",
        formats=("harbor",),
        task_dirs=TaskDirs(claims=_is_harbor, load=harbor.load_harbor),
    ),
    Suite(name="native", formats=("native",), task_dirs=TaskDirs(holds("task.toml"), load_native)),
    claw_mini.SUITE,
    drills.SUITE,
    claweval.SUITE,
    TERMINAL_BENCH,
    qwenclawbench.SUITE,
    Suite(
        name="osworld",
        formats=("osworld",),
        checkout=Checkout(load=osworld.load_osworld, recognise=osworld.is_osworld_suite),
    ),
    Suite(name="webvoyager", formats=("webjudge",), checkout=Checkout(webjudge.load_webvoyager)),
    Suite(name="online-mind2web", formats=("webjudge",), checkout=Checkout(webjudge.load_mind2web)),
)

BY_NAME: dict[str, Suite] = {s.name: s for s in SUITES}
# The suites' own splits, beside OpenForge's train and test.
SUITE_SPLITS: tuple[str, ...] = tuple(split for s in SUITES for split in s.splits)
