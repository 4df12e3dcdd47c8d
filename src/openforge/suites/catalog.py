"""The suites OpenForge loads, in a fixed order.

The order is part of the contract: a directory is the task of the first suite whose
``task_dirs`` claims it, and a checkout given without ``KIND:`` is the first suite that
recognises it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

from openforge.suites import claw_mini
from openforge.suites.claweval.metrics import pass_metrics
from openforge.suites.qwenclawbench.metrics import score_metrics
from openforge.suites.suite import Checkout, Metrics, Suite, TaskDirs, TaskFiles
from openforge.tasks import claweval, harbor, miniwob, osworld, qwenclawbench, webapps, webjudge
from openforge.tasks.drills import DRILL_SUITE, drill_suite
from openforge.tasks.foreign import load_claweval, load_qwenclawbench
from openforge.tasks.model import TaskError
from openforge.tasks.native import load_native

__all__ = ["BY_NAME", "SUITES", "SUITE_SPLITS", "TERMINAL_BENCH"]


def _holds(*names: str) -> Callable[[Path], bool]:
    """A claim on the directories holding every one of ``names``."""
    return lambda d: all((d / name).is_file() for name in names)


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


def _finds(find: Callable[[Path], object]) -> Callable[[Path], bool]:
    """A recogniser from a suite's own ``find`` (which raises TaskError when it is not one)."""

    def recognise(root: Path) -> bool:
        try:
            find(root)
        except TaskError:
            return False
        return True

    return recognise


TERMINAL_BENCH = Suite(
    name="terminal-bench",
    formats=("terminal-bench",),
    task_dirs=TaskDirs(claims=_holds("task.yaml"), load=harbor.load_terminal_bench),
)

SUITES: tuple[Suite, ...] = (
    Suite(
        name=miniwob.MINIWOB_SUITE,
        formats=("miniwob",),
        task_dirs=TaskDirs(claims=_holds(miniwob.MINIWOB_FILE), load=miniwob.load_miniwob),
        bundled=miniwob.miniwob_suite,
    ),
    Suite(
        name=webapps.WEBAPPS_SUITE,
        formats=("webapp",),
        task_dirs=TaskDirs(claims=_holds(webapps.WEBAPP_FILE), load=webapps.load_webapp),
        bundled=webapps.webapps_suite,
    ),
    Suite(
        name="harbor",
        formats=("harbor",),
        task_dirs=TaskDirs(claims=_is_harbor, load=harbor.load_harbor),
    ),
    Suite(name="native", formats=("native",), task_dirs=TaskDirs(_holds("task.toml"), load_native)),
    claw_mini.SUITE,
    Suite(name=DRILL_SUITE, formats=("native",), bundled=drill_suite),
    Suite(
        name="claweval",
        formats=("claweval",),
        checkout=Checkout(
            load=claweval.load_claweval_checkout, recognise=_finds(claweval.find_claweval)
        ),
        # The older per-task layout: task.yaml beside its own grader.py.
        task_dirs=TaskDirs(claims=_holds("task.yaml", "grader.py"), load=load_claweval),
        splits=claweval.SPLITS,
        metrics=Metrics(pass_metrics, by_split=True),
    ),
    TERMINAL_BENCH,
    Suite(
        name="qwenclawbench",
        formats=("qwenclawbench",),
        checkout=Checkout(
            load=qwenclawbench.load_qwenclawbench_checkout,
            recognise=_finds(qwenclawbench.find_checkout),
        ),
        # PinchBench-style task files anywhere under the path given.
        task_files=TaskFiles(glob="task_*.md", load=load_qwenclawbench),
        metrics=Metrics(score_metrics),
    ),
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
