"""The GRPO loop: rollouts → samples → update → weight sync → metrics, step after step.

Per step ``t``: ``B`` train tasks × ``G`` rollouts go through the orchestrator (harness in
a sandbox, calls through the gateway, which records them); the finished rollouts are read
back from the gateway's store through ``traces/`` as samples; GRPO advantages per group;
one trainer update; the new weights are pushed to the gateway; metrics are written.

Async mode (``async_rollouts``): the rollouts of step ``t+1`` start before step ``t``
trains, with the weights of version ``v``; they are trained at ``v+1`` (staleness 1).
A sample is dropped when ``trainer.version − (oldest version it was sampled with)``
exceeds ``max_staleness``. Truncated importance sampling corrects what remains.

Rollouts the reward-hack monitor flagged (``flag_severity`` and up) are dropped, trained
with reward 0 or kept, as ``flagged_rollouts`` says; each step counts them.

Failures: a step whose rollouts all failed (or left nothing trainable) is logged and
skipped; a rejected (non-finite) update pushes nothing. Each step's rollouts go to
``<run_dir>/rollouts/step-N`` and the orchestrator skips finished ``(task, sample)`` pairs
on a rerun, so a killed run restarted from its last checkpoint loses no rollout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforge.rollouts.config import RolloutConfig, RolloutResult
from openforge.tasks.model import Task
from openforge.traces.samples import (
    FlagPolicy,
    FlagSeverity,
    Mode,
    Sample,
    TraceCounts,
    TraceOptions,
)
from openforge.traces.source import CallSource, load_blobs, plan_rollouts
from openforge.training.advantages import grpo_advantages
from openforge.training.config import TrainConfig
from openforge.training.curriculum import Curriculum, curriculum_skills
from openforge.training.metrics import MetricsWriter, mean_by_skill, reward_summary, skills
from openforge.training.sampling import TaskSampler
from openforge.training.trainer import Trainer
from openforge.training.weight_sync import WeightSync

__all__ = [
    "LoopEnv",
    "RunSummary",
    "StepBatch",
    "checkpoint_extra",
    "collect",
    "evaluate",
    "latest_checkpoint",
    "read_samples",
    "run_loop",
    "save_checkpoint",
    "tasks_for_step",
]

log = logging.getLogger("openforge.training")

# Harnesses whose adapters take ``max_tokens`` and ``temperature`` options (the built-in
# claw, browser-agent and computer-agent; mini-swe-agent's written into its model_kwargs):
# the run's sampling settings go there.
SAMPLING_OPTION_HARNESSES = ("claw", "mini-swe-agent", "browser-agent", "computer-agent")

RunRollouts = Callable[[RolloutConfig], Awaitable[Sequence[RolloutResult]]]
_CKPT = re.compile(r"^step-(\d+)$")


@dataclass(slots=True)
class LoopEnv:
    """Everything the loop talks to; :mod:`openforge.training.session` builds the real one."""

    gateway_url: str  # the gateway's admin listener
    admin_token: str | None
    store: CallSource
    run_rollouts: RunRollouts
    trainer: Trainer
    sync: WeightSync
    metrics: MetricsWriter
    train_tasks: list[Task]
    eval_tasks: list[Task]
    # What the checkpoint the run resumed from recorded (``next_step``, ``warmed_up``,
    # ``sft_updates``); empty for a fresh run.
    resumed: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StepBatch:
    """One step's rollouts and the samples read back for them."""

    results: list[RolloutResult]
    samples: list[Sample] = field(default_factory=list)
    counts: TraceCounts = field(default_factory=TraceCounts)
    rollout_s: float = 0.0
    images: dict[str, bytes] = field(default_factory=dict)  # digest → bytes, for VLMs
    sampling: dict[str, float] = field(default_factory=dict)  # dynamic sampling's counts
    # the curriculum's per-bucket pass rates after the step's groups, and the step's mix
    curriculum: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(slots=True)
class RunSummary:
    steps_done: int
    version: int
    evals: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0


def tasks_for_step(tasks: Sequence[Task], step: int, per_step: int, seed: int) -> list[Task]:
    """``per_step`` tasks for ``step``: epochs over ``tasks``, each in a seeded shuffle.

    Deterministic in ``step``, so a resumed run asks for the same tasks again.
    """
    if not tasks:
        return []
    sampler = TaskSampler(tasks, seed, cursor=step * per_step)
    return [sampler.at(i) for i in range(step * per_step, (step + 1) * per_step)]


def _rollout_config(
    cfg: TrainConfig, env: LoopEnv, tasks: list[Task], n: int, split: str, tag: str, step: int
) -> RolloutConfig:
    extra = dict(cfg.rollout_options)
    harness_options = dict(extra.pop("harness_options", {}))
    if cfg.harness in SAMPLING_OPTION_HARNESSES:
        harness_options.setdefault("max_tokens", cfg.max_tokens)
        evaluating = tag.startswith("eval") and cfg.eval_temperature is not None
        harness_options.setdefault(
            "temperature", cfg.eval_temperature if evaluating else cfg.temperature
        )
    extra.setdefault("monitor_rules", cfg.monitor_rules)
    return RolloutConfig(
        tasks=tasks,
        harness=cfg.harness,
        gateway_url=env.gateway_url,
        harness_options=harness_options,
        n=n,
        concurrency=cfg.concurrency,
        backend=cfg.sandbox,
        split=split,
        out_dir=Path(cfg.run_dir) / "rollouts" / tag,
        admin_token=env.admin_token,
        metadata={"step": step, "phase": tag},
        **extra,
    )


async def collect(
    cfg: TrainConfig, env: LoopEnv, tasks: list[Task], n: int, split: str, tag: str, step: int
) -> list[RolloutResult]:
    """Run ``n`` rollouts of each task through the orchestrator."""
    return list(await env.run_rollouts(_rollout_config(cfg, env, tasks, n, split, tag, step)))


async def read_samples(
    source: CallSource,
    results: Sequence[RolloutResult],
    mode: str,
    flagged: str = "keep",
    flag_severity: str = "low",
    allow_held_out: bool = False,
) -> tuple[list[Sample], TraceCounts]:
    """The finished rollouts' samples, read from the store through ``traces/``; rollouts
    the monitor flagged at ``flag_severity`` or above are kept, dropped or zeroed
    (``flagged``)."""
    options = TraceOptions(
        mode=Mode(mode),
        require_reward=True,
        flagged=FlagPolicy(flagged),
        flag_severity=FlagSeverity(flag_severity),
    )
    counts = TraceCounts()
    read: list[str] = []
    rewards: dict[str, float] = {}
    for res in results:
        if res.rollout_id is None or res.status == "infra_error" or res.reward is None:
            # Masked on the orchestrator's word, whatever the store holds: a rollout whose
            # gateway was lost may sit there open, or finished by a later run.
            counts.masked_rollouts[res.status or "no_rollout"] += 1
            continue
        read.append(res.rollout_id)
        rewards[res.rollout_id] = res.reward  # the orchestrator's finish reached the store
    samples: list[Sample] = []
    for plan in await plan_rollouts(source, read, options, rewards, allow_held_out):
        counts.add(plan.counts)
        samples.extend(plan.samples)
    return samples, counts


def _staleness(sample: Sample, version: int) -> int:
    versions = [int(v) for v in sample.weight_versions if str(v).isdigit()]
    return version - min(versions) if versions else 0


async def _gather_step(
    cfg: TrainConfig, env: LoopEnv, step: int, sampler: TaskSampler
) -> StepBatch:
    """The step's rollouts: ``B`` tasks × ``G``; with dynamic sampling
    (``max_sample_rounds`` > 1) more rounds of tasks until ``B`` groups have a reward
    spread. Each round's results go to their own directory (``step-N``, ``step-N-r1``, …)."""
    started = time.perf_counter()
    results: list[RolloutResult] = []
    kept = rounds = drawn = 0
    mix: dict[str, float] = {}
    while rounds < cfg.max_sample_rounds and kept < cfg.tasks_per_step:
        tasks = sampler.draw(cfg.tasks_per_step - kept, step)
        if not tasks:
            break
        if sampler.curriculum is not None:
            for task in tasks:
                bucket = sampler.curriculum.bucket_of(task.id) or task.id
                mix[bucket] = mix.get(bucket, 0.0) + 1.0
        tag = f"step-{step:06d}" + (f"-r{rounds}" if rounds else "")
        got = await collect(cfg, env, tasks, cfg.group_size, cfg.train_split, tag, step)
        results.extend(got)
        kept += sampler.observe(_groups(got).items(), step)
        rounds += 1
        drawn += len(tasks)
    samples, counts = await read_samples(
        env.store,
        results,
        cfg.sample_mode,
        cfg.flagged_rollouts,
        cfg.flag_severity,
        cfg.allow_held_out,
    )
    blobs = await load_blobs(env.store, (i.sha256 for s in samples for i in s.images))
    images = {digest: blob.data for digest, blob in blobs.items()}
    batch = StepBatch(results, samples, counts, time.perf_counter() - started, images)
    batch.sampling = {
        "sample_rounds": float(rounds),
        "groups_drawn": float(drawn),
        "tasks_resting": float(sampler.resting_now(step)),
        "skills_resting": float(sampler.skills_resting_now(step)),
    }
    if sampler.curriculum is not None:
        rates = sampler.curriculum.rates()
        batch.curriculum = {"curriculum_rates": rates, "curriculum_mix": mix}
        log.info(
            "step %d: curriculum pass rates %s; drew %s", step,
            ", ".join(f"{b} {r:.2f}" for b, r in rates.items()) or "none yet",
            ", ".join(f"{b} x{n:.0f}" for b, n in sorted(mix.items())),
        )  # fmt: skip
    return batch


def _groups(results: Sequence[RolloutResult]) -> dict[str, list[float]]:
    """Rewards by task of the scored (not masked) results."""
    by_task: dict[str, list[float]] = {}
    for r in results:
        if r.status != "infra_error" and r.reward is not None:
            by_task.setdefault(r.task_id, []).append(float(r.reward))
    return by_task


async def _train_on(cfg: TrainConfig, env: LoopEnv, step: int, batch: StepBatch) -> bool:
    """Advantages, update, sync and metrics for one step; False when skipped."""
    trainer = env.trainer
    ok = [r for r in batch.results if r.status != "infra_error" and r.reward is not None]
    rollout_metrics = {
        **reward_summary(_groups(ok)),
        **batch.sampling,
        **batch.curriculum,
        "rollouts_total": float(len(batch.results)),
        "masked_rollouts": float(len(batch.results) - len(ok)),
        "rollout_s": batch.rollout_s,
        "trace_masked": dict(batch.counts.masked_rollouts),
        "flagged_rollouts": float(batch.counts.flagged),
    }
    sampled = float(sum(sum(s.loss_mask) for s in batch.samples))
    if batch.rollout_s > 0:  # tokens the engine sampled (and the trainer can train) per s
        rollout_metrics["engine_tokens_per_s"] = sampled / batch.rollout_s
    if not ok:
        log.warning("step %d: all %d rollouts failed; skipped", step, len(batch.results))
        env.metrics.write("skip", step, {**rollout_metrics, "reason": "all rollouts failed"})
        return False
    fresh = [s for s in batch.samples if _staleness(s, trainer.version) <= cfg.max_staleness]
    staleness = [_staleness(s, trainer.version) for s in batch.samples]
    reward_of = {r.rollout_id: float(r.reward or 0.0) for r in ok if r.rollout_id}
    adv = grpo_advantages(
        (
            (s.group_id or s.rollout_id, s.rollout_id, _reward(s, reward_of, cfg))
            for s in _one_per_rollout(fresh)
        ),
        scale=cfg.advantage_scale,
        solved_advantage=cfg.solved_advantage,
        uniform_rollouts=cfg.uniform_rollouts,
        kl_anchor=cfg.kl_coef > 0,
    )
    rollout_metrics |= {
        "stale_dropped": float(len(batch.samples) - len(fresh)),
        "staleness_mean": sum(staleness) / len(staleness) if staleness else 0.0,
        "staleness_max": float(max(staleness, default=0)),
        "groups_kept": float(adv.kept_groups),
        "groups_zero_variance": float(adv.zero_variance_groups),
        "groups_solved": float(adv.solved_groups),
        "groups_kl_only": float(adv.kl_only_groups),
    }
    if not adv.advantages:
        log.info("step %d: no group with a reward spread; no update", step)
        env.metrics.write("skip", step, {**rollout_metrics, "reason": "no reward variance"})
        return False
    result = await asyncio.to_thread(trainer.train_step, fresh, adv.advantages, batch.images)
    if not result.accepted:
        log.warning("step %d: update rejected (%s); weights not pushed", step, result.reason)
        env.metrics.write("skip", step, {**rollout_metrics, "reason": result.reason})
        return False
    if result.reason is not None:  # some of the step's updates were made, the rest not
        log.warning(
            "step %d: later updates rejected (%s); the earlier ones kept", step, result.reason
        )
    synced = await env.sync.push(trainer, result.version)
    log.info(
        "step %d: reward %.2f over %d rollouts (%.0f s), %d groups kept, loss %.4f, "
        "%.0f train tokens/s -> weights v%d", step, rollout_metrics["reward_mean"], len(ok),
        batch.rollout_s, adv.kept_groups, result.metrics["loss"],
        result.metrics["train_tokens_per_s"], result.version,
    )  # fmt: skip
    env.metrics.write(
        "train",
        step,
        {
            **rollout_metrics,
            **result.metrics,
            "version": result.version,
            "sync_export_s": synced.export_s,
            "sync_load_s": synced.load_s,
        },
    )
    return True


def _reward(sample: Sample, reward_of: dict[str, float], cfg: TrainConfig) -> float:
    """The reward a sample trains with: its rollout's, as the orchestrator finished it;
    0 for a rollout the monitor flagged when flagged rollouts are zeroed."""
    if sample.flags and cfg.flagged_rollouts == "zero":
        return 0.0
    return reward_of.get(sample.rollout_id, sample.reward or 0.0)


def _one_per_rollout(samples: Sequence[Sample]) -> list[Sample]:
    seen: set[str] = set()
    out = []
    for s in samples:
        if s.rollout_id not in seen:
            seen.add(s.rollout_id)
            out.append(s)
    return out


async def evaluate(cfg: TrainConfig, env: LoopEnv, tag: str, step: int) -> dict[str, Any]:
    """Held-out reward, pass rate and pass@k over ``eval_samples`` rollouts per task."""
    started = time.perf_counter()
    log.info(
        "eval %s: %d held-out tasks x %d samples (weights v%d)...",
        tag, len(env.eval_tasks), cfg.eval_samples, env.trainer.version,
    )  # fmt: skip
    results = await collect(
        cfg, env, env.eval_tasks, cfg.eval_samples, cfg.eval_split, f"eval-{tag}", step
    )
    by_task: dict[str, list[float]] = {}
    masked = 0
    for r in results:
        if r.status == "infra_error" or r.reward is None:
            masked += 1
            continue
        by_task.setdefault(r.task_id, []).append(float(r.reward))
    ks = sorted({1, cfg.eval_samples})
    summary = {
        **reward_summary(by_task, ks=ks),
        "per_skill": mean_by_skill(by_task, skills(env.eval_tasks)),
        "masked_rollouts": float(masked),
        "flagged_rollouts": float(sum(1 for r in results if r.flags)),
        "tag": tag,
        "version": env.trainer.version,
        "eval_s": time.perf_counter() - started,
    }
    env.metrics.write("eval", step, summary)
    log.info(
        "eval %s: reward %.2f, pass@1 %.2f, %d masked (%.0f s)", tag, summary["reward_mean"],
        summary["pass@1"], masked, time.perf_counter() - started,
    )  # fmt: skip
    return summary


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoints/step-N`` of a run (temp dirs are ignored)."""
    root = Path(run_dir) / "checkpoints"
    found = [
        (int(m.group(1)), p)
        for p in (root.iterdir() if root.is_dir() else [])
        if (m := _CKPT.match(p.name)) and (p / "trainer_state.json").is_file()
    ]
    return max(found)[1] if found else None


def checkpoint_extra(run_dir: str | Path) -> dict[str, Any] | None:
    """What the run's newest checkpoint recorded (``next_step``, ``warmed_up``, …), read
    without loading it; None when it has none."""
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return None
    state = json.loads((ckpt / "trainer_state.json").read_text())
    extra = state.get("extra")
    return dict(extra) if isinstance(extra, dict) else {}


async def save_checkpoint(
    cfg: TrainConfig,
    env: LoopEnv,
    next_step: int,
    sampler: dict[str, object] | None = None,
    warmed_up: bool = True,
    sft_updates: int | None = None,
) -> None:
    """Write ``checkpoints/step-<next_step>`` (the step to run next and the sampler's state
    with it), keeping the newest ``cfg.keep_checkpoints``. ``warmed_up=False`` with
    ``sft_updates``: a checkpoint taken part way through the SFT warm-up."""
    root = Path(cfg.run_dir) / "checkpoints"
    extra: dict[str, object] = {"next_step": next_step, "warmed_up": warmed_up}
    if sft_updates is not None:
        extra["sft_updates"] = sft_updates
    if sampler is not None:
        extra["sampler"] = sampler
    await asyncio.to_thread(env.trainer.save_checkpoint, root / f"step-{next_step:06d}", extra)
    kept = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _CKPT.match(p.name)))
    for _, old in kept[: -cfg.keep_checkpoints]:
        shutil.rmtree(old, ignore_errors=True)


async def resume(cfg: TrainConfig, env: LoopEnv) -> dict[str, Any]:
    """Load the last checkpoint (if any), push its weights; returns its ``extra`` record
    (``next_step``: the step to run next; ``warmed_up``: the warm-up is done)."""
    ckpt = latest_checkpoint(cfg.run_dir)
    if ckpt is None:
        return {}
    extra = await asyncio.to_thread(env.trainer.load_checkpoint, ckpt)
    if env.trainer.version > 0:
        await env.sync.push(env.trainer, env.trainer.version)
    log.info("resumed from %s (version %d)", ckpt, env.trainer.version)
    return extra


Warmup = Callable[[TrainConfig, LoopEnv], Awaitable[None]]


async def run_loop(
    cfg: TrainConfig, env: LoopEnv, evaluate_edges: bool = True, warmup: Warmup | None = None
) -> RunSummary:
    """Train for ``cfg.steps`` steps (resuming from the run dir's last checkpoint).

    ``warmup`` (the SFT phase, ``training/teacher.py``) runs after the "before" evaluation
    and before the first GRPO step; it is checkpointed as step 0, so a resumed run skips it.
    """
    extra = await resume(cfg, env)
    env.resumed = extra
    start = int(extra.get("next_step", 0))
    warmed = bool(extra.get("warmed_up", start > 0))
    summary = RunSummary(steps_done=start, version=env.trainer.version)
    evals_done = _evals_done(env)
    sampler = TaskSampler(
        env.train_tasks,
        cfg.seed,
        cfg.rest_steps,
        cursor=start * cfg.tasks_per_step,
        skill_of=skills(env.train_tasks),
        skill_rest_after=cfg.skill_rest_after,
        curriculum=_curriculum(cfg, env.train_tasks),
    )
    if isinstance(extra.get("sampler"), dict):
        sampler.load(extra["sampler"])
    # The sampler's state before each step's draws: a checkpoint taken when step t is done
    # saves the state step t+1 started from, even when its rollouts already ran (async).
    before_draws: dict[int, dict[str, object]] = {}

    def gather(step: int) -> asyncio.Task[StepBatch]:
        before_draws[step] = sampler.state()
        return asyncio.create_task(_gather_step(cfg, env, step, sampler))

    async def evaluate_once(tag: str, step: int) -> None:
        """An evaluation, unless this run recorded it before at these weights."""
        done = evals_done.get(tag)
        if done is not None and (tag == "before" or done.get("version") == env.trainer.version):
            log.info("eval %s: done before (reward %s); skipped", tag, done.get("reward_mean"))
            summary.evals.append(done)
            return
        summary.evals.append(await evaluate(cfg, env, tag, step))

    if extra:
        _say_resumed(cfg, extra, evals_done)
    if evaluate_edges and not warmed and env.eval_tasks:
        await evaluate_once("before", 0)
    if warmup is not None and not warmed:
        await warmup(cfg, env)
        await save_checkpoint(cfg, env, start)
    if start == 0:  # later steps' checkpoints carry the reference set here
        env.trainer.reset_reference()
    if cfg.eval_every and env.eval_tasks and 0 < start < cfg.steps and start % cfg.eval_every == 0:
        await evaluate_once(f"step-{start}", start)  # it may have been cut short
    pending: asyncio.Task[StepBatch] | None = None
    try:
        for step in range(start, cfg.steps):
            if pending is None:
                pending = gather(step)
            batch = await pending
            pending = None
            if cfg.async_rollouts and step + 1 < cfg.steps:
                pending = gather(step + 1)
            if not await _train_on(cfg, env, step, batch):
                summary.skipped += 1
            summary.steps_done = step + 1
            summary.version = env.trainer.version
            if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                draws = before_draws.get(step + 1, sampler.state())
                await save_checkpoint(cfg, env, step + 1, draws)
            mid = cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps
            if mid and env.eval_tasks:
                await evaluate_once(f"step-{step + 1}", step + 1)
    finally:
        if pending is not None:
            pending.cancel()
    if evaluate_edges and env.eval_tasks and summary.steps_done == cfg.steps:
        await evaluate_once("after", cfg.steps)
    return summary


def _curriculum(cfg: TrainConfig, tasks: list[Task]) -> Curriculum | None:
    """The run's curriculum, when its config turns one on."""
    if not cfg.curriculum:
        return None
    return Curriculum(
        tasks, curriculum_skills(tasks), cfg.seed, cfg.curriculum_low, cfg.curriculum_high,
        cfg.curriculum_window, cfg.curriculum_explore,
    )  # fmt: skip


def _evals_done(env: LoopEnv) -> dict[str, dict[str, Any]]:
    """The run's evaluations recorded so far, by tag (the last of each)."""
    return {str(r.get("tag")): r for r in env.metrics.read() if r.get("kind") == "eval"}


def _say_resumed(cfg: TrainConfig, extra: dict[str, Any], evals: dict[str, Any]) -> None:
    """One line: where a resumed run goes on, and which finished phases it skips."""
    start = int(extra.get("next_step", 0))
    warmed = bool(extra.get("warmed_up", start > 0))
    done = [f"evaluation {tag}" for tag in evals]
    if cfg.sft_epochs:
        if warmed:
            done.insert(0, "teacher and SFT")
        elif "sft_updates" in extra:
            done.insert(0, f"teacher, SFT updates 1-{extra['sft_updates']}")
    log.info(
        "resuming %s at GRPO step %d/%d; done before, skipped: %s",
        cfg.run_dir, start + 1, cfg.steps, ", ".join(done) or "nothing",
    )  # fmt: skip
