"""Does the policy learn, and does the RL step itself teach? SmolLM2-135M + the claw agent
(or mini-swe-agent, unmodified: ``--harness mini-swe-agent``) on claw-drill: held-out reward
before training, after the SFT warm-up and after SFT + GRPO, with 95% intervals over seeds,
and the GRPO-only difference (after GRPO − after SFT, paired per seed) with its interval.

Each seed is a full run of the quickstart recipe (own run dir, own gateway; ``--jobs``
seeds side by side): evaluate on the held-out tasks (claw-drill's test instances: the train
skills with file names, words and numbers from a pool no train instance uses; 1 sample per
task before training, ``--eval-samples`` after), SFT warm-up on the reference solutions of
``--sft-per-family`` train instances per skill (played through the gateway by the scripted
engine as the harness's own bash tool calls), evaluate, ``--steps`` GRPO steps on all train
instances with groups of ``--group-size`` and DAPO-style dynamic sampling
(``--sample-rounds``, ``--rest-steps``), evaluate again. Each seed's run directory gets its
``report.html`` and ``summary.json`` (cost); the whole run's figures go to ``bench.json``.
``--from-sft RUN_DIR``: every seed's GRPO starts from that run's SFT checkpoint, which is
evaluated once (``--sft-eval-samples`` per task, a job of its own) for all seeds; the
GRPO-only interval then adds that evaluation's own noise to the interval over seeds.
Besides the overall figures, the GRPO-only gain on the held-out tasks within the SFT
policy's reach (``training/reach.py``): those some but not all of the SFT evaluation's
even-numbered samples solved (chosen before GRPO; ``within_reach.json`` in each seed's run
dir), measured against its odd-numbered samples, per seed (paired over tasks) and pooled
over seeds with 95% intervals, and pass@1 after GRPO against the SFT policy's pass@k there.
Last, each skill's pass rate SFT -> GRPO (seeds pooled) and the skills whose loss exceeds
their samples' noise (``training/reach.py`` ``skill_changes``).
Target (issues 19, 46): GRPO-only gain >= 10 points with an interval above 0, 3 seeds, 60 min;
no skill losing more than the noise.

    .venv/bin/python bench/learning.py [--quick] [--seeds 3] [--jobs 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from intervals import ci95  # bench/intervals.py, beside this file
from openforge.lifetime import end_with_parent
from openforge.models.registry import resolve_model
from openforge.suites.loading import load_tasks
from openforge.training.config import TrainConfig
from openforge.training.loop import LoopEnv, evaluate, resume, run_loop, save_checkpoint
from openforge.training.metrics import skills
from openforge.training.quickstart import QUICKSTART_SUITE, quickstart_config, teacher_tasks
from openforge.training.reach import (
    eval_rewards,
    fixed_tasks_se,
    reach_report,
    skill_changes,
    within_reach,
)
from openforge.training.report import write_run_report
from openforge.training.session import open_session
from openforge.training.teacher import TEACHER_HARNESSES, sft_warmup, teacher_samples


async def one_seed(
    seed: int,
    steps: int,
    root: Path,
    sft_per_family: int,
    changes: dict[str, Any],
    from_sft: Path | None = None,
    sft_only: bool = False,
) -> dict[str, Any]:
    """Held-out reward before, after the SFT warm-up and after GRPO for one seed.

    ``from_sft``: a warm-up checkpoint (``checkpoints/step-000000`` of a quickstart-recipe
    run) to start GRPO from, instead of recording the teacher and running SFT here; the
    ``before`` figure is then that run's own ``before`` evaluation. ``sft_only``: stop
    after the warm-up and its evaluation, leaving the warm-up's checkpoint
    (``checkpoints/step-000000``) for ``--from-sft``; "after" is then the SFT figure.
    """
    cfg = quickstart_config(str(root / f"seed-{seed}"), steps)
    cfg = dataclasses.replace(cfg, seed=seed, **changes)
    started = time.perf_counter()
    sft_eval: dict[str, Any] = {}
    if from_sft is not None:
        target = Path(cfg.run_dir) / "checkpoints" / from_sft.name
        if not target.exists():
            shutil.copytree(from_sft, target)
    async with open_session(cfg) as env:
        if from_sft is not None:
            # The SFT checkpoint is evaluated once for all seeds (eval_sft_checkpoint).
            await resume(cfg, env)  # the SFT weights, in the trainer and the engine
            before = {"reward_mean": _before_of(from_sft.parent.parent)}
            await run_loop(cfg, env, evaluate_edges=False)
        else:
            teach = teacher_tasks(env.train_tasks, sft_per_family)
            samples = await teacher_samples(cfg, teach, resolve_model(cfg.model))
            # Before training SmolLM2-135M makes no tool call (reward 0 in every run so
            # far): one sample per held-out task is enough there.
            before = await evaluate(dataclasses.replace(cfg, eval_samples=1), env, "before", 0)
            sft = sft_warmup(samples)

            async def warmup(c: TrainConfig, e: LoopEnv) -> None:
                await sft(c, e)
                sft_eval.update(await evaluate(c, e, "sft", 0))
                # The tasks within reach, fixed from the SFT samples before GRPO runs.
                reach = within_reach(eval_rewards(Path(c.run_dir) / "rollouts" / "eval-sft"))
                (Path(c.run_dir) / "within_reach.json").write_text(
                    json.dumps(dataclasses.asdict(reach), indent=1)
                )

            if sft_only:  # the warm-up's checkpoint, for later --from-sft runs
                await warmup(cfg, env)
                await save_checkpoint(cfg, env, 0)
            else:
                await run_loop(cfg, env, evaluate_edges=False, warmup=warmup)
        after = sft_eval if sft_only else await evaluate(cfg, env, "after", cfg.steps)
    wall = time.perf_counter() - started
    await write_run_report(cfg, Path(cfg.run_dir) / "store.db", wall)
    rollouts = Path(cfg.run_dir) / "rollouts"
    sft_rewards = eval_rewards(rollouts / "eval-sft") if from_sft is None else None
    after_rewards = eval_rewards(rollouts / ("eval-sft" if sft_only else "eval-after"))
    return {
        "seed": seed,
        "sft_by_task": _means(sft_rewards) if sft_rewards is not None else None,
        "after_by_task": _means(after_rewards),
        "sft_rewards": sft_rewards,
        "after_rewards": after_rewards,
        "before": float(before["reward_mean"]),
        "sft": float(sft_eval.get("reward_mean", float("nan"))),
        "after": float(after["reward_mean"]),
        "wall_s": wall,
        "load_1min_end": os.getloadavg()[0],
    }


async def eval_sft_checkpoint(
    root: Path, from_sft: Path, changes: dict[str, Any], samples: int, seed: int = 0
) -> dict[str, Any]:
    """The shared SFT checkpoint's held-out evaluation (``samples`` per task; ``seed`` is
    its run's), once for every seed's GRPO to be compared against."""
    cfg = quickstart_config(str(root / "sft-eval"), 1)  # no step runs: evaluation only
    cfg = dataclasses.replace(cfg, **{**changes, "eval_samples": samples, "seed": seed})
    target = Path(cfg.run_dir) / "checkpoints" / from_sft.name
    if not target.exists():
        shutil.copytree(from_sft, target)
    async with open_session(cfg) as env:
        await resume(cfg, env)
        result = await evaluate(cfg, env, "sft", 0)
    rewards = eval_rewards(Path(cfg.run_dir) / "rollouts" / "eval-sft")
    # The tasks within reach, fixed from this evaluation alone (every seed's GRPO is apart).
    reach = dataclasses.asdict(within_reach(rewards))
    (Path(cfg.run_dir) / "within_reach.json").write_text(json.dumps(reach, indent=1))
    return {"sft": float(result["reward_mean"]), "by_task": rewards}


def run_sft_eval(
    root: Path, from_sft: Path, changes: dict[str, Any], samples: int, seed: int
) -> Any:
    """:func:`eval_sft_checkpoint` in this process (a worker of ``--jobs``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [sft] %(message)s", force=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(eval_sft_checkpoint(root, from_sft, changes, samples, seed))


def _before_of(run_dir: Path) -> float:
    """The ``before`` evaluation's reward recorded in a run's ``metrics.jsonl``."""
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "eval" and record.get("tag") == "before":
            return float(record["reward_mean"])
    raise SystemExit(f"{run_dir}/metrics.jsonl: no 'before' evaluation")


def _means(by_task: dict[str, list[float]]) -> dict[str, float]:
    """Mean reward per held-out task of one evaluation."""
    return {t: statistics.fmean(v) for t, v in by_task.items()}


def _weights_digest(checkpoint: Path) -> str:
    """The sha256 of a checkpoint's trained weights (which checkpoint an evaluation saw)."""
    digest = hashlib.sha256()
    with (checkpoint / "trainable.safetensors").open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pooled_sft_evals(root: Path, earlier: list[Path]) -> dict[str, Any]:
    """This run's SFT evaluation (``ROOT/sft-eval``) pooled with earlier bench runs'
    evaluations of the same checkpoint: every sample per held-out task, and each
    evaluation's own mean. An evaluation of another checkpoint is refused by name."""
    mine = root / "sft-eval"
    digest = _weights_digest(mine / "checkpoints" / "step-000000")
    by_task: dict[str, list[float]] = {}
    means: list[float] = []
    for run in [root, *earlier]:
        checkpoint = run / "sft-eval" / "checkpoints" / "step-000000"
        if not (checkpoint / "trainable.safetensors").is_file():
            raise SystemExit(f"{checkpoint}: no SFT checkpoint evaluated there (--sft-evals-from)")
        if run != root and _weights_digest(checkpoint) != digest:
            raise SystemExit(
                f"{checkpoint}: another checkpoint than {mine / 'checkpoints'} (--sft-evals-from)"
            )
        rewards = eval_rewards(run / "sft-eval" / "rollouts" / "eval-sft")
        means.append(statistics.fmean([x for v in rewards.values() for x in v]))
        for task, values in rewards.items():
            by_task.setdefault(task, []).extend(values)
    every = [x for v in by_task.values() for x in v]
    return {"sft": statistics.fmean(every), "by_task": by_task, "evaluations": means}


def run_seed(
    seed: int,
    steps: int,
    root: Path,
    per_family: int,
    changes: dict[str, Any],
    from_sft: Path | None = None,
    sft_only: bool = False,
) -> Any:
    """One seed in this process (a worker of ``--jobs``)."""
    # force: a worker process that ran another seed before keeps its handler otherwise
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s [seed {seed}] %(message)s", force=True
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(one_seed(seed, steps, root, per_family, changes, from_sft, sft_only))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, 2 steps, 1 eval sample")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--first-seed", type=int, default=0,
        help="seeds are FIRST..FIRST+S-1: a second run repeats none of the first's seeded "
        "choices (warm-up order, task draws, trainer seed) with --first-seed 3",
    )  # fmt: skip
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eval-samples", type=int, default=4, help="samples per held-out task")
    ap.add_argument("--group-size", type=int, default=8, help="G: rollouts per task")
    ap.add_argument("--tasks-per-step", type=int, default=4, help="B: groups per step")
    ap.add_argument(
        "--sample-rounds", type=int, default=3,
        help="dynamic sampling: rounds per step until B groups have a reward spread (1: off)",
    )  # fmt: skip
    ap.add_argument(
        "--rest-steps", type=int, default=2,
        help="a task whose group was uniform is not drawn for this many steps (0: off)",
    )  # fmt: skip
    ap.add_argument(
        "--skill-rest-after", type=int, default=0,
        help="a skill whose last N groups were uniform rests as a whole for --rest-steps (0: off)",
    )  # fmt: skip
    ap.add_argument(
        "--curriculum", action="store_true",
        help="draw GRPO's tasks by their skill and level's pass rate (training/curriculum.py)",
    )  # fmt: skip
    ap.add_argument(
        "--suite", default=QUICKSTART_SUITE, choices=(QUICKSTART_SUITE, "claw-drill-levels"),
        help="claw-drill, or its skills at difficulty levels 0-2 (held out: every level's "
        "test instances)",
    )  # fmt: skip
    ap.add_argument("--learning-rate", type=float, default=4e-5, help="GRPO learning rate")
    ap.add_argument(
        "--updates-per-step", type=int, default=1,
        help="optimizer updates per GRPO step, each on its share of the step's samples",
    )  # fmt: skip
    ap.add_argument(
        "--solved-advantage", type=float, default=None,
        help="self-imitation: the advantage of (up to 2) rollouts of a group that all passed, "
        "which GRPO drops (default 0: dropped; training/advantages.py)",
    )  # fmt: skip
    ap.add_argument(
        "--kl-coef", type=float, default=None,
        help="β of the KL to the policy GRPO starts from, also on 2 rollouts of each group "
        "without a spread (default 0: no KL)",
    )  # fmt: skip
    ap.add_argument(
        "--sft-per-family",
        type=int,
        default=2,
        help="train instances per skill family whose solutions the SFT warm-up uses",
    )
    ap.add_argument(
        "--sft-epochs", type=int, default=None,
        help="passes of the SFT warm-up over the teacher trajectories (default: the quickstart's)",
    )  # fmt: skip
    ap.add_argument(
        "--sft-learning-rate", type=float, default=None,
        help="the SFT warm-up's learning rate (default: the quickstart's)",
    )  # fmt: skip
    ap.add_argument(
        "--sft-only", action="store_true",
        help="stop each seed after the warm-up and its evaluation: a checkpoint for --from-sft",
    )  # fmt: skip
    ap.add_argument(
        "--temperature", type=float, default=None,
        help="the GRPO rollouts' sampling temperature (default: the quickstart's)",
    )  # fmt: skip
    ap.add_argument(
        "--sft-eval-samples", type=int, default=0,
        help="with --from-sft: samples per held-out task of the shared SFT checkpoint's "
        "evaluation, run once for all seeds (0: --eval-samples)",
    )  # fmt: skip
    ap.add_argument(
        "--sft-evals-from", type=Path, nargs="+", default=[], metavar="RUN_DIR",
        help="with --from-sft: earlier runs of this bench from the same SFT checkpoint; their "
        "SFT evaluations are pooled with this run's (a single evaluation's mean moves by "
        "several points from run to run)",
    )  # fmt: skip
    ap.add_argument(
        "--report-only", action="store_true",
        help="run nothing: print the figures of the finished run in --run-dir (its bench.json) "
        "again, e.g. with --sft-evals-from",
    )  # fmt: skip
    ap.add_argument("--run-dir", default="runs/bench-learning")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run side by side")
    ap.add_argument(
        "--from-sft", type=Path, default=None,
        help="start every seed's GRPO from this run's SFT warm-up checkpoint "
        "(RUN_DIR of a quickstart-recipe run, e.g. runs/quickstart) instead of its own SFT",
    )  # fmt: skip
    ap.add_argument(
        "--harness", default="claw", choices=TEACHER_HARNESSES,
        help="the agent trained: the built-in claw, or mini-swe-agent unmodified",
    )  # fmt: skip
    args = ap.parse_args()
    if args.report_only:
        report_again(Path(args.run_dir), args.sft_evals_from)
        return
    if args.sft_evals_from and args.from_sft is None:
        raise SystemExit("--sft-evals-from pools evaluations of the --from-sft checkpoint")
    seeds, steps, k = (1, 2, 1) if args.quick else (args.seeds, args.steps, args.eval_samples)
    changes: dict[str, Any] = {
        "eval_samples": k,
        "group_size": args.group_size,
        "tasks_per_step": args.tasks_per_step,
        "max_sample_rounds": args.sample_rounds,
        "rest_steps": args.rest_steps,
        "skill_rest_after": args.skill_rest_after,
        "learning_rate": args.learning_rate,
        "updates_per_step": args.updates_per_step,
    }
    optional = {
        "sft_epochs": args.sft_epochs,
        "sft_learning_rate": args.sft_learning_rate,
        "temperature": args.temperature,
        "solved_advantage": args.solved_advantage,
        "kl_coef": args.kl_coef,
    }
    changes |= {name: value for name, value in optional.items() if value is not None}
    if args.curriculum:
        changes["curriculum"] = True
    if args.suite != QUICKSTART_SUITE:
        changes["tasks"] = args.suite
    if args.sft_only and args.from_sft is not None:
        raise SystemExit("--sft-only makes the warm-up checkpoint that --from-sft starts from")
    if args.harness == "mini-swe-agent":
        # The same budget as claw's 3 turns: the solution's command, the submit, one spare.
        changes |= {
            "harness": args.harness,
            "rollout_options": {"harness_options": {"step_limit": 3}},
        }
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    started = time.perf_counter()
    root, per_family = Path(args.run_dir), args.sft_per_family
    from_sft = None
    if args.from_sft is not None:
        # Copied now: the source run keeps only its newest checkpoints and may delete it.
        source = args.from_sft / "checkpoints" / "step-000000"
        if not (source / "trainer_state.json").is_file():
            raise SystemExit(f"{source}: no SFT warm-up checkpoint there")
        from_sft = root / "sft-source" / "checkpoints" / "step-000000"
        if not from_sft.exists():
            shutil.copytree(source, from_sft)
            shutil.copy(args.from_sft / "metrics.jsonl", root / "sft-source" / "metrics.jsonl")
    load_start = os.getloadavg()[0]
    sft_samples = args.sft_eval_samples or k
    # --jobs > 1: seeds side by side, each in its own process with its own gateway
    # Workers end with this process (a killed bench leaves no seed training behind). A
    # seed's process peaks near 10 GB (two seeds and their gateways were OOM-killed on
    # 24 GB): each seed gets a fresh process, so none starts beside what an earlier seed
    # left allocated, and fewer malloc arenas keep the trainer's threads from holding
    # freed memory apart (glibc reads the variable at start, so workers inherit it).
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    spawn = multiprocessing.get_context("spawn")
    tie: dict[str, Any] = {"initializer": end_with_parent, "initargs": (os.getpid(),)}
    with ProcessPoolExecutor(args.jobs, mp_context=spawn, max_tasks_per_child=1, **tie) as ex:
        shared = None
        if from_sft is not None:
            shared = ex.submit(run_sft_eval, root, from_sft, changes, sft_samples, args.first_seed)
        futures = [
            ex.submit(run_seed, s, steps, root, per_family, changes, from_sft, args.sft_only)
            for s in range(args.first_seed, args.first_seed + seeds)
        ]
        runs = [f.result() for f in futures]
        sft_shared = shared.result() if shared is not None else None
    wall = time.perf_counter() - started
    if sft_shared is not None and args.sft_evals_from:
        sft_shared = pooled_sft_evals(root, args.sft_evals_from)
    record: dict[str, Any] = {
        "settings": changes, "steps": steps, "runs": runs, "wall_s": wall,
        "load_start": load_start, "harness": args.harness, "sft_only": args.sft_only,
        "eval_samples": k, "sft_eval_samples": sft_samples,
    }  # fmt: skip
    if sft_shared is not None:
        record["sft_shared"] = {"reward": sft_shared["sft"]}
    report(record, sft_shared)
    root.mkdir(parents=True, exist_ok=True)
    if sft_shared is not None:
        record["sft_shared"]["se"] = fixed_tasks_se(sft_shared["by_task"])
        record["sft_shared"]["evaluations"] = sft_shared.get("evaluations", [sft_shared["sft"]])
    (root / "bench.json").write_text(json.dumps(record, indent=1))


def report_again(root: Path, earlier: list[Path]) -> None:
    """``--report-only``: the figures of the finished run in ``root`` (its ``bench.json``),
    with its SFT evaluation pooled with ``earlier`` runs' when given."""
    path = root / "bench.json"
    if not path.is_file():
        raise SystemExit(f"{path}: no finished run there (--report-only)")
    record = json.loads(path.read_text())
    sft_shared = None
    if "sft_shared" in record:
        sft_shared = pooled_sft_evals(root, earlier)
    elif earlier:
        raise SystemExit(f"{path}: not a --from-sft run; nothing to pool (--sft-evals-from)")
    report(record, sft_shared)


def report(record: dict[str, Any], sft_shared: dict[str, Any] | None) -> None:
    """Print a run's figures: held-out reward before, after SFT and after GRPO with 95%
    intervals over seeds, the GRPO-only gain, and each seed's gain paired over tasks."""
    runs, steps, changes = record["runs"], record["steps"], record["settings"]
    sft_half = 0.0  # the SFT figure's own 95% half-width
    evaluations: list[float] = []
    if sft_shared is not None:
        for r in runs:
            r["sft"] = sft_shared["sft"]
            r["sft_by_task"] = {t: statistics.fmean(v) for t, v in sft_shared["by_task"].items()}
        sft_half = 1.96 * fixed_tasks_se(sft_shared["by_task"])
        evaluations = sft_shared.get("evaluations", [sft_shared["sft"]])
        if len(evaluations) > 1:
            # Evaluations of one checkpoint have differed by more than each one's sample
            # noise says (15.7 against 20.1-20.6): the larger of the two counts.
            sft_half = max(sft_half, ci95(evaluations)[1])
    rows = [
        ("before (baseline)", [r["before"] for r in runs]),
        ("after SFT", [r["sft"] for r in runs]),
        ("after SFT + GRPO", [r["after"] for r in runs]),
        ("gain (total)", [r["after"] - r["before"] for r in runs]),
        ("gain (GRPO only)", [r["after"] - r["sft"] for r in runs]),
    ]
    sft_only = bool(record.get("sft_only", False))
    if sft_only:  # no GRPO ran: "after" is the SFT figure
        rows = rows[:2]
    k = record.get("eval_samples", changes.get("eval_samples"))
    samples = f"{k} samples each"
    if sft_shared is not None:
        widest = max(len(v) for v in sft_shared["by_task"].values())
        per_eval = record.get("sft_eval_samples", widest // len(evaluations))
        samples += f" ({per_eval} per evaluation of the shared SFT checkpoint)"
    harness = record.get("harness", changes.get("harness", "claw"))
    suite = changes.get("tasks", QUICKSTART_SUITE)
    print(f"harness: {harness}; held-out: the {suite} test instances (names "
          f"and words no train instance uses), {samples}")  # fmt: skip
    for name, values in rows:
        mean, half = ci95(values)
        if name == "gain (GRPO only)" and sft_shared is not None:
            # One SFT figure for every seed: its own evaluation noise is added to the
            # interval over seeds (independent errors add in quadrature).
            half = math.sqrt(half**2 + sft_half**2)
        print(f"{name:18} reward {100 * mean:6.1f} ± {100 * half:.1f} points "
              f"(seeds: {', '.join(f'{100 * v:.0f}' for v in values)})")  # fmt: skip
    if sft_shared is not None:
        each = ", ".join(f"{100 * m:.1f}" for m in evaluations)
        which = (
            "evaluated once for all seeds"
            if len(evaluations) == 1
            else f"{len(evaluations)} evaluations pooled ({each}; this run's first)"
        )
        print(f"(the SFT checkpoint, {which}: {100 * sft_shared['sft']:.1f}"
              f" ± {100 * sft_half:.1f} points, its evaluation noise)")  # fmt: skip
    # The GRPO-only difference paired per held-out task within each seed: an interval over
    # tasks that says whether this seed's change exceeds its evaluation noise.
    for i, r in enumerate([] if sft_only else runs):
        seed = r.get("seed", i)  # runs recorded before the seed was kept: their order
        sft_by, after_by = r["sft_by_task"], r["after_by_task"]
        diffs = [after_by[t] - sft_by[t] for t in sorted(sft_by.keys() & after_by.keys())]
        mean, half = ci95(diffs)
        print(f"seed {seed}: GRPO only, paired over {len(diffs)} held-out tasks: "
              f"{100 * mean:+.1f} ± {100 * half:.1f} points")  # fmt: skip
    if not sft_only:
        _report_reach(runs, sft_shared)
        _report_skills(runs, sft_shared, suite)
    loads = ", ".join(f"{r['load_1min_end']:.1f}" for r in runs)
    trained = "SFT only" if sft_only else f"SFT + {steps} GRPO steps"
    start = record.get("load_start")
    at_start = f"{start:.1f} at the start, " if start is not None else ""
    print(f"{len(runs)} seeds x ({trained}) in {record['wall_s'] / 60:.1f} min, load average "
          f"(1 min) {at_start}{loads} at each seed's end")  # fmt: skip
    print(f"settings: {changes} (target: GRPO-only gain >= 10 points, interval above 0)")


def _report_reach(runs: list[dict[str, Any]], sft_shared: dict[str, Any] | None) -> None:
    """The GRPO-only gain on held-out tasks the SFT policy solves sometimes but not always
    (``training/reach.py``): chosen on the SFT evaluation's even samples, measured against
    its odd ones."""
    if any(r.get("after_rewards") is None for r in runs):
        print("(within reach: this bench.json predates per-sample rewards; not reported)")
        return
    if sft_shared is not None:
        sft = [sft_shared["by_task"]] * len(runs)
    else:
        sft = [r["sft_rewards"] for r in runs]
    after = [r["after_rewards"] for r in runs]
    seeds = [r.get("seed", i) for i, r in enumerate(runs)]
    for line in reach_report(sft, after, sft_shared is not None, seeds):
        print(line)


def _report_skills(
    runs: list[dict[str, Any]], sft_shared: dict[str, Any] | None, suite: str
) -> None:
    """Each skill's held-out pass rate, SFT -> after GRPO (seeds pooled), and the skills
    whose loss exceeds their samples' noise (``training/reach.py`` ``skill_changes``)."""
    if any(r.get("after_rewards") is None for r in runs):
        return  # a bench.json from before per-sample rewards: reported nowhere else either
    sft = [sft_shared["by_task"]] if sft_shared is not None else [r["sft_rewards"] for r in runs]
    changes = skill_changes(
        sft, [r["after_rewards"] for r in runs], skills(load_tasks(suite).tasks)
    )
    print("per skill, SFT -> GRPO (held-out samples, seeds pooled): " + ", ".join(
        f"{c.skill} {c.sft:.2f}->{c.after:.2f}" for c in changes
    ))  # fmt: skip
    losing = [c for c in changes if c.loses]
    print("skills losing more than the noise (95% interval of the change below 0): " + (
        "; ".join(
            f"{c.skill} {100 * c.change.mean:+.1f} ± {100 * c.change.half:.1f} points "
            f"({c.sft_samples} SFT vs {c.after_samples} GRPO samples)"
            for c in losing
        ) or "none"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
