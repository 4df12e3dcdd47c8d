"""QwenClawBench's headline metrics, computed as its ``scripts/benchmark.py`` and
``lib_grading.pass_k_stats`` compute them.

A task's score is the mean over its runs; ``mean_score`` the mean over tasks (reported also
per ``category``, its domains); pass@j / pass^j for j up to the trials requested count a run
as passed only at score 1.0.
"""

from __future__ import annotations

from math import comb

from openforge.suites.suite import Scores

__all__ = ["score_metrics"]


def score_metrics(scores: Scores, k: int) -> dict[str, float | int]:
    """The mean score over tasks with a graded run, and pass@j / pass^j for j in 1..k."""
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
