"""The suites OpenForge loads, in a fixed order.

The order is part of the contract: a directory is the task of the first suite whose
``task_dirs`` claims it (miniwob.toml, webapp.toml, a Harbor task.toml, a native one,
ClawEval's task.yaml + grader.py, Terminal-Bench's task.yaml), and a checkout given without
``KIND:`` is the first suite that recognises it (ClawEval, QwenClawBench, OSWorld).
"""

from __future__ import annotations

from openforge.suites import (
    claw_mini,
    claweval,
    drills,
    harbor,
    miniwob,
    osworld,
    qwenclawbench,
    webapps,
    webjudge,
)
from openforge.suites.native import NATIVE
from openforge.suites.suite import Suite

__all__ = ["BY_NAME", "SUITES", "SUITE_SPLITS"]

SUITES: tuple[Suite, ...] = (
    miniwob.SUITE,
    webapps.SUITE,
    harbor.HARBOR,
    NATIVE,
    claw_mini.SUITE,
    drills.SUITE,
    drills.LEVELS_SUITE,
    claweval.SUITE,
    harbor.TERMINAL_BENCH,
    qwenclawbench.SUITE,
    osworld.SUITE,
    webjudge.WEBVOYAGER,
    webjudge.MIND2WEB,
)

BY_NAME: dict[str, Suite] = {s.name: s for s in SUITES}
# The suites' own splits, beside OpenForge's train and test.
SUITE_SPLITS: tuple[str, ...] = tuple(split for s in SUITES for split in s.splits)
