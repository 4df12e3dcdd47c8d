"""ClawEval's headline metrics, computed as its ``score_summary.py`` and ``models/scoring.py``
compute them.

A trial passes when its task score is >= 0.75; over a task's trials, pass^k holds when every
trial passes (its leaderboard's Pass^3) and pass@k when any does; the average score is the
mean task score. Reported overall, per ``category`` and per split. ClawEval re-runs trials
that failed for infrastructure reasons until each task has its k graded trials; here
``infra_error`` trials are left out (never counted as 0) and a task with fewer graded trials
than requested is left out of pass^k / pass@k (and listed as incomplete).
"""

from __future__ import annotations

from openforge.suites.suite import Scores

__all__ = ["PASS", "pass_metrics"]

PASS = 0.75


def pass_metrics(scores: Scores, k: int) -> dict[str, float | int]:
    """pass^k, pass@k and the average score over the tasks with ``k`` graded trials."""
    full = {t: s[:k] for t, s in scores.items() if len(s) >= k}
    n = len(full)
    return {
        "tasks": n,
        f"pass^{k}": sum(all(x >= PASS for x in s) for s in full.values()) / n if n else 0.0,
        f"pass@{k}": sum(any(x >= PASS for x in s) for s in full.values()) / n if n else 0.0,
        "avg_score": sum(sum(s) / len(s) for s in full.values()) / n if n else 0.0,
    }
