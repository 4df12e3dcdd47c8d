"""The published suites' own headline metrics, computed the way each suite computes them.

- **ClawEval** (``score_summary.py``, ``models/scoring.py``): a trial passes when its task
  score is >= 0.75; over a task's trials, pass^k holds when every trial passes (its
  leaderboard's Pass^3) and pass@k when any does; the average score is the mean task
  score. Reported overall, per ``category`` and per split. ClawEval re-runs trials that
  failed for infrastructure reasons until each task has its k graded trials; here
  ``infra_error`` trials are left out (never counted as 0) and a task with fewer graded
  trials than requested is listed under ``incomplete`` and left out of pass^k / pass@k.
- **QwenClawBench** (``scripts/benchmark.py``, ``lib_grading.pass_k_stats``): a task's
  score is the mean over its runs; ``mean_score`` the mean over tasks, here also per
  ``category`` (its domains); pass@k / pass^k count a run as passed only at score 1.0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from math import comb
from typing import Protocol

from openforge.tasks.model import Task

__all__ = ["Scored", "SuiteMetrics", "suite_metrics"]

CLAWEVAL_PASS = 0.75


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


def _claweval(scores: dict[str, list[float]], k: int) -> dict[str, float | int]:
    full = {t: s[:k] for t, s in scores.items() if len(s) >= k}
    n = len(full)
    return {
        "tasks": n,
        f"pass^{k}": sum(all(x >= CLAWEVAL_PASS for x in s) for s in full.values()) / n
        if n
        else 0.0,
        f"pass@{k}": sum(any(x >= CLAWEVAL_PASS for x in s) for s in full.values()) / n
        if n
        else 0.0,
        "avg_score": sum(sum(s) / len(s) for s in full.values()) / n if n else 0.0,
    }


def _qwenclawbench(scores: dict[str, list[float]], k: int) -> dict[str, float | int]:
    graded = {t: s for t, s in scores.items() if s}
    n = len(graded)
    out: dict[str, float | int] = {
        "tasks": n,
        "mean_score": sum(sum(s) / len(s) for s in graded.values()) / n if n else 0.0,
    }
    for j in range(1, k + 1):
        at, hat = [], []
        for s in graded.values():
            c = sum(x >= 1.0 - 1e-9 for x in s)
            # As lib_grading: a task with fewer runs than j counts 0 for that j.
            enough = len(s) >= j
            at.append(1.0 - comb(len(s) - c, j) / comb(len(s), j) if enough else 0.0)
            hat.append(comb(c, j) / comb(len(s), j) if enough else 0.0)
        out[f"pass@{j}"] = sum(at) / len(at) if at else 0.0
        out[f"pass^{j}"] = sum(hat) / len(hat) if hat else 0.0
    return out


def suite_metrics(
    tasks: Iterable[Task], results: Iterable[Scored], trials: int
) -> list[SuiteMetrics]:
    """The metrics of each published suite that ``tasks`` come from (none for other tasks)."""
    by_id = {t.id: t for t in tasks}
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        task = by_id.get(r.task_id)
        if task is None or task.format not in ("claweval", "qwenclawbench"):
            continue
        scores[task.format].setdefault(r.task_id, [])
        if r.status != "infra_error" and r.reward is not None:
            scores[task.format][r.task_id].append(r.reward)
    out = []
    for suite, per_task in sorted(scores.items()):
        metric = _claweval if suite == "claweval" else _qwenclawbench
        m = SuiteMetrics(suite=suite, trials=trials, overall=metric(per_task, trials))
        groups: dict[str, dict[str, dict[str, list[float]]]] = {
            "category": defaultdict(dict),
            "split": defaultdict(dict),
        }
        for task_id, s in per_task.items():
            groups["category"][by_id[task_id].category or "(none)"][task_id] = s
            groups["split"][by_id[task_id].split][task_id] = s
        m.by_category = {c: metric(g, trials) for c, g in sorted(groups["category"].items())}
        if suite == "claweval":
            m.by_split = {c: metric(g, trials) for c, g in sorted(groups["split"].items())}
        m.incomplete = sorted(t for t, s in per_task.items() if len(s) < trials)
        out.append(m)
    return out
