"""The published suites' own headline metrics, each computed the way its suite computes it.

Each suite of the catalog with :attr:`~openforge.suites.suite.Suite.metrics` (ClawEval:
``suites/claweval/metrics.py``; QwenClawBench: ``suites/qwenclawbench/metrics.py``) is
reported for the tasks of its formats, overall and per ``category`` (and per split where it
says so). ``infra_error`` trials are left out (never counted as 0); a task with fewer graded
trials than requested is listed under ``incomplete``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from openforge.suites.catalog import SUITES
from openforge.suites.suite import Suite
from openforge.tasks.model import Task

__all__ = ["Scored", "SuiteMetrics", "suite_metrics"]


class Scored(Protocol):
    """One graded trial, as a rollout's result records it."""

    @property
    def task_id(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def reward(self) -> float | None: ...


@dataclass(slots=True)
class SuiteMetrics:
    """One suite's metrics: overall, per category (domain) and per split."""

    suite: str
    trials: int
    overall: dict[str, float | int] = field(default_factory=dict)
    by_category: dict[str, dict[str, float | int]] = field(default_factory=dict)
    by_split: dict[str, dict[str, float | int]] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)


def _reporting(fmt: str) -> Suite | None:
    """The suite whose metrics cover tasks of format ``fmt``."""
    return next((s for s in SUITES if s.metrics and fmt in s.formats), None)


def suite_metrics(
    tasks: Iterable[Task], results: Iterable[Scored], trials: int
) -> list[SuiteMetrics]:
    """The metrics of each published suite that ``tasks`` come from (none for other tasks)."""
    by_id = {t.id: t for t in tasks}
    suites: dict[str, Suite] = {}
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        task = by_id.get(r.task_id)
        if task is None or (suite := _reporting(task.format)) is None:
            continue
        suites[suite.name] = suite
        scores[suite.name].setdefault(r.task_id, [])
        if r.status != "infra_error" and r.reward is not None:
            scores[suite.name][r.task_id].append(r.reward)
    out = []
    for name, per_task in sorted(scores.items()):
        spec = suites[name].metrics
        assert spec is not None  # only suites with metrics are collected
        m = SuiteMetrics(suite=name, trials=trials, overall=spec.compute(per_task, trials))
        groups: dict[str, dict[str, dict[str, list[float]]]] = {
            "category": defaultdict(dict),
            "split": defaultdict(dict),
        }
        for task_id, s in per_task.items():
            groups["category"][by_id[task_id].category or "(none)"][task_id] = s
            groups["split"][by_id[task_id].split][task_id] = s
        m.by_category = {c: spec.compute(g, trials) for c, g in sorted(groups["category"].items())}
        if spec.by_split:
            m.by_split = {c: spec.compute(g, trials) for c, g in sorted(groups["split"].items())}
        m.incomplete = sorted(t for t, s in per_task.items() if len(s) < trials)
        out.append(m)
    return out
