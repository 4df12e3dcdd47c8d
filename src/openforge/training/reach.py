"""RL's own gain where RL can act: held-out tasks the SFT policy solves sometimes but not
always, their paired gain with 95% intervals, and pass@1 after GRPO against the SFT
policy's pass@k.

GRPO learns only from groups with a reward spread; a held-out task the SFT policy never
solves (or always solves) is one it can hardly move, and averaging over those hides what
the RL step did. :func:`within_reach` picks the tasks from the SFT checkpoint's own
evaluation samples alone (so the choice is fixed before GRPO runs), and — with two or more
samples per task — selects on one half of each task's samples and measures the baseline on
the other. Selecting and measuring on the same samples would bias the baseline towards
the middle (regression to the mean: a task truly solved 2% of the time that happened to
pass 1 of 4 samples enters at 25%), and with it the gain.

The intervals are Student-t intervals (:func:`ci95`); the t quantile is computed from the
regularized incomplete beta function, not a table.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from openforge.rollouts.metrics import pass_at_k
from openforge.training.metrics import rewards_by_skill

__all__ = [
    "Interval",
    "Reach",
    "ReachGain",
    "SkillChange",
    "ci95",
    "eval_rewards",
    "fixed_tasks_se",
    "pooled_gain",
    "reach_gain",
    "reach_report",
    "skill_changes",
    "t_quantile",
    "within_reach",
]


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean and the half-width of its 95% interval (nan with fewer than 2 values)."""

    mean: float
    half: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or below 0."""
        return math.isfinite(self.half) and abs(self.mean) > self.half


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on the
    CDF; exact to ~1e-10)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p} df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2.0


def ci95(values: Sequence[float]) -> Interval:
    """Mean and half-width of the 95% Student-t interval of ``values``."""
    if not values:
        return Interval(float("nan"), float("nan"), 0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, float("nan"), 1)
    t = t_quantile(0.975, len(values) - 1)
    return Interval(mean, t * statistics.stdev(values) / math.sqrt(len(values)), len(values))


def fixed_tasks_se(by_task: Mapping[str, Sequence[float]]) -> float:
    """Standard error of the mean over a fixed set of tasks of each task's mean reward,
    from the spread of each task's samples (an evaluation's own noise; the tasks are not
    resampled)."""
    var = 0.0
    for rewards in by_task.values():
        if len(rewards) >= 2:
            var += statistics.variance(rewards) / len(rewards)
    return math.sqrt(var) / max(len(by_task), 1)


@dataclass(frozen=True, slots=True)
class Reach:
    """The held-out tasks within the SFT policy's reach, and the SFT samples that measure
    its baseline there (not the ones that chose the tasks, when there were two or more)."""

    tasks: tuple[str, ...]
    baseline: dict[str, list[float]]  # task -> the SFT rewards the gain is measured against
    selection_samples: int  # samples per task the choice used (the most any task had)
    tasks_seen: int  # held-out tasks the SFT evaluation scored


def within_reach(sft_by_task: Mapping[str, Sequence[float]], pass_threshold: float = 1.0) -> Reach:
    """The tasks whose SFT samples passed sometimes but not always.

    The even-numbered samples choose and the odd-numbered ones are the baseline (see the
    module docstring): with fewer than 3 samples per task no task can be seen "sometimes
    solved" with a baseline left over, and none is within reach.
    """
    chosen: list[str] = []
    baseline: dict[str, list[float]] = {}
    most = 0
    for task in sorted(sft_by_task):
        rewards = list(sft_by_task[task])
        pick, rest = rewards[0::2], rewards[1::2]
        most = max(most, len(pick))
        passes = sum(1 for r in pick if r >= pass_threshold)
        if rest and 0 < passes < len(pick):
            chosen.append(task)
            baseline[task] = rest
    return Reach(tuple(chosen), baseline, most, len(sft_by_task))


@dataclass(frozen=True, slots=True)
class ReachGain:
    """One seed's figures on the tasks within reach."""

    gain: Interval  # mean over tasks of (after − SFT baseline), paired per task
    sft: float  # the SFT baseline's mean reward there
    after: float  # the trained policy's mean reward there
    pass1_after: float  # pass@1 after GRPO
    pass1_sft: float  # the SFT policy's pass@1 (baseline samples)
    passk_sft: float  # the SFT policy's pass@k, k = the baseline samples per task
    k: int
    baseline_se: float  # the baseline's own evaluation noise (standard error)


def _pass_k(rewards: Sequence[float], k: int, threshold: float) -> float:
    passes = sum(1 for r in rewards if r >= threshold)
    return pass_at_k(len(rewards), passes, min(k, len(rewards)))


def reach_gain(
    reach: Reach, after_by_task: Mapping[str, Sequence[float]], pass_threshold: float = 1.0
) -> ReachGain | None:
    """The gain on ``reach``'s tasks (those the trained policy's evaluation also scored);
    None when no task is within reach."""
    tasks = [t for t in reach.tasks if after_by_task.get(t)]
    if not tasks:
        return None
    diffs = [
        statistics.fmean(after_by_task[t]) - statistics.fmean(reach.baseline[t]) for t in tasks
    ]
    k = min(len(reach.baseline[t]) for t in tasks)

    def over(f: Mapping[str, Sequence[float]], kk: int) -> float:
        return statistics.fmean(_pass_k(f[t], kk, pass_threshold) for t in tasks)

    return ReachGain(
        gain=ci95(diffs),
        sft=statistics.fmean(statistics.fmean(reach.baseline[t]) for t in tasks),
        after=statistics.fmean(statistics.fmean(after_by_task[t]) for t in tasks),
        pass1_after=over(after_by_task, 1),
        pass1_sft=over(reach.baseline, 1),
        passk_sft=over(reach.baseline, k),
        k=k,
        baseline_se=fixed_tasks_se({t: reach.baseline[t] for t in tasks}),
    )


def pooled_gain(gains: Sequence[float], shared_baseline_se: float | None = None) -> Interval:
    """The gain over seeds: a t-interval over the seeds' gains. When every seed is measured
    against one shared SFT evaluation (``shared_baseline_se``), that evaluation's noise is
    common to all seeds and absent from their spread: it is added in quadrature."""
    over = ci95(gains)
    if shared_baseline_se is None or not math.isfinite(over.half):
        return over
    return Interval(over.mean, math.hypot(over.half, 1.959964 * shared_baseline_se), over.n)


def reach_report(
    sft_per_seed: Sequence[Mapping[str, Sequence[float]]],
    after_per_seed: Sequence[Mapping[str, Sequence[float]]],
    shared_sft: bool = False,
    seeds: Sequence[int] | None = None,
) -> list[str]:
    """A bench's lines on the tasks within reach: each seed's paired gain with its interval
    over tasks, pass@1 after against the SFT pass@1 and pass@k, and the gain pooled over
    seeds. ``shared_sft``: every seed started from one SFT checkpoint, evaluated once (its
    baseline noise is added to the pooled interval)."""
    lines: list[str] = []
    gains: list[float] = []
    shared_se = None
    labels = list(seeds) if seeds is not None else list(range(len(after_per_seed)))
    for seed, sft, after in zip(labels, sft_per_seed, after_per_seed, strict=True):
        reach = within_reach(sft)
        g = reach_gain(reach, after)
        if g is None:
            lines.append(
                f"seed {seed}: no held-out task within reach (of {reach.tasks_seen}, chosen on "
                f"{reach.selection_samples} SFT sample(s) each; 3+ SFT samples per task are "
                "needed: 2 to choose, the rest to measure)"
            )
            continue
        gains.append(g.gain.mean)
        shared_se = g.baseline_se if shared_sft else None
        lines.append(
            f"seed {seed}: within reach {len(reach.tasks)} of {reach.tasks_seen} held-out tasks: "
            f"SFT {100 * g.sft:.1f} -> GRPO {100 * g.after:.1f}, gain {100 * g.gain.mean:+.1f} "
            f"± {100 * g.gain.half:.1f} points (paired over tasks); pass@1 after "
            f"{100 * g.pass1_after:.1f} vs SFT pass@1 {100 * g.pass1_sft:.1f}, "
            f"pass@{g.k} {100 * g.passk_sft:.1f}"
        )
    if gains:
        pooled = pooled_gain(gains, shared_se)
        verdict = "excludes 0" if pooled.excludes_zero else "does not exclude 0"
        lines.append(
            f"within reach, GRPO only, pooled over {len(gains)} seed(s): "
            f"{100 * pooled.mean:+.1f} ± {100 * pooled.half:.1f} points ({verdict})"
        )
    return lines


@dataclass(frozen=True, slots=True)
class SkillChange:
    """One skill's held-out reward under the SFT checkpoint and after GRPO, every sample
    of its tasks pooled (over seeds too), and the 95% interval of the change."""

    skill: str
    sft: float
    after: float
    change: Interval  # Agresti–Caffo: both sides' pass fractions with one pass and one fail added
    sft_samples: int
    after_samples: int

    @property
    def loses(self) -> bool:
        """Whether the skill lost more than its samples' noise: the interval lies below 0."""
        return self.change.excludes_zero and self.change.mean < 0


def _pass_fraction_change(sft: Sequence[float], after: Sequence[float]) -> Interval:
    # Agresti & Caffo (2000): adding one pass and one fail to each side keeps the interval
    # honest at the edges, where a skill passed in all 32 SFT samples would otherwise count
    # as having no noise of its own. Rewards in [0, 1] count as pass fractions.
    def adjusted(xs: Sequence[float]) -> tuple[float, float]:
        p = (sum(xs) + 1) / (len(xs) + 2)
        return p, p * (1 - p) / (len(xs) + 2)

    (p_sft, v_sft), (p_after, v_after) = adjusted(sft), adjusted(after)
    return Interval(p_after - p_sft, 1.959964 * math.sqrt(v_sft + v_after), len(after))


def skill_changes(
    sft_runs: Sequence[Mapping[str, Sequence[float]]],
    after_runs: Sequence[Mapping[str, Sequence[float]]],
    skill_of: Mapping[str, str],
) -> list[SkillChange]:
    """Each skill's change from the SFT evaluations (``sft_runs``: one shared evaluation
    or one per seed) to the evaluations after GRPO (one per seed), pooled per skill over
    its tasks' samples. "No skill loses more than the noise" means no ``loses`` here."""
    sft, after = rewards_by_skill(sft_runs, skill_of), rewards_by_skill(after_runs, skill_of)
    return [
        SkillChange(
            skill,
            statistics.fmean(sft[skill]),
            statistics.fmean(after[skill]),
            _pass_fraction_change(sft[skill], after[skill]),
            len(sft[skill]),
            len(after[skill]),
        )
        for skill in sorted(sft.keys() & after.keys())
        if sft[skill] and after[skill]
    ]


def eval_rewards(eval_dir: Path) -> dict[str, list[float]]:
    """The rewards per task of one evaluation (its ``results.jsonl``), in sample order;
    infra errors left out."""
    rows = []
    for line in (eval_dir / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("reward") is not None and r.get("status") != "infra_error":
            rows.append((str(r["task_id"]), int(r.get("sample", 0)), float(r["reward"])))
    by: dict[str, list[float]] = {}
    for task, _, reward in sorted(rows, key=lambda row: (row[0], row[1])):
        by.setdefault(task, []).append(reward)
    return by
