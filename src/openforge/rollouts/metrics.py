"""Summaries of a run: counts per status, mean reward, and unbiased pass@k and pass^k.

With n scored samples of a task of which c pass:

- pass@k = 1 - C(n-c, k) / C(n, k): the chance that at least one of k samples passes;
- pass^k = C(c, k) / C(n, k): the chance that all k samples pass.

``infra_error`` rollouts carry no reward and are left out of n (they are masked, not failed).
A task with fewer than k scored samples has no value for that k. Overall figures are the
mean over the tasks that have one. ``flagged`` counts the rollouts the reward-hack monitor
flagged (traces/monitor.py), whatever their status; ``flagged_rules`` how often each rule did.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import comb

from openforge.rollouts.config import STATUSES, RolloutResult

__all__ = ["RunSummary", "TaskStats", "pass_at_k", "pass_hat_k", "summarize"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c passes (requires k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k pass) from n samples with c passes (requires k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return comb(c, k) / comb(n, k)


@dataclass(slots=True)
class TaskStats:
    task_id: str
    n: int  # scored samples
    passed: int
    mean_reward: float | None
    statuses: dict[str, int]
    pass_at: dict[int, float] = field(default_factory=dict)
    pass_hat: dict[int, float] = field(default_factory=dict)


@dataclass(slots=True)
class RunSummary:
    total: int
    statuses: dict[str, int]
    mean_reward: float | None
    tasks: list[TaskStats]
    pass_at: dict[int, float] = field(default_factory=dict)
    pass_hat: dict[int, float] = field(default_factory=dict)
    flagged: int = 0
    flagged_rules: dict[str, int] = field(default_factory=dict)


def summarize(
    results: Iterable[RolloutResult], ks: Sequence[int] = (1,), threshold: float = 1.0
) -> RunSummary:
    """Counts, mean reward and pass@k / pass^k (a sample passes when reward >= threshold)."""
    by_task: dict[str, list[RolloutResult]] = defaultdict(list)
    for r in results:
        by_task[r.task_id].append(r)
    stats: list[TaskStats] = []
    all_rewards: list[float] = []
    statuses: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    flagged = 0
    for task_id, rs in by_task.items():
        for r in rs:
            flagged += bool(r.flags)
            rules.update(r.flags)
        rewards = [r.reward for r in rs if r.status != "infra_error" and r.reward is not None]
        all_rewards += rewards
        counts = Counter(r.status for r in rs)
        statuses.update(counts)
        n, c = len(rewards), sum(x >= threshold - 1e-9 for x in rewards)
        st = TaskStats(
            task_id=task_id,
            n=n,
            passed=c,
            mean_reward=sum(rewards) / n if n else None,
            statuses=dict(counts),
        )
        for k in ks:
            if 1 <= k <= n:
                st.pass_at[k] = pass_at_k(n, c, k)
                st.pass_hat[k] = pass_hat_k(n, c, k)
        stats.append(st)
    summary = RunSummary(
        total=sum(statuses.values()),
        statuses={s: statuses.get(s, 0) for s in STATUSES},
        mean_reward=sum(all_rewards) / len(all_rewards) if all_rewards else None,
        tasks=stats,
        flagged=flagged,
        flagged_rules=dict(sorted(rules.items())),
    )
    for k in ks:
        at = [s.pass_at[k] for s in stats if k in s.pass_at]
        hat = [s.pass_hat[k] for s in stats if k in s.pass_hat]
        if at:
            summary.pass_at[k] = sum(at) / len(at)
            summary.pass_hat[k] = sum(hat) / len(hat)
    return summary
