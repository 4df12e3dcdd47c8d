"""ClawEval: tasks read from the user's claw-eval checkout (``loader.py``), graded by its own
graders in a child process (``grader.py``, ``grade_child.py``), reported as its leaderboard
does (``metrics.py``)."""

from __future__ import annotations

from openforge.suites.claweval.legacy import load_claweval
from openforge.suites.claweval.loader import SPLITS, find_claweval, load_claweval_checkout
from openforge.suites.claweval.metrics import pass_metrics
from openforge.suites.suite import Checkout, Metrics, Suite, TaskDirs, found_by, holds

__all__ = ["SUITE"]

SUITE = Suite(
    name="claweval",
    formats=("claweval",),
    checkout=Checkout(load=load_claweval_checkout, recognise=found_by(find_claweval)),
    # The older per-task layout: task.yaml beside its own grader.py.
    task_dirs=TaskDirs(claims=holds("task.yaml", "grader.py"), load=load_claweval),
    splits=SPLITS,
    metrics=Metrics(pass_metrics, by_split=True),
)
