"""Does a GUI policy learn? SmolLM2-135M + the built-in browser agent in accessibility-tree
mode (text only) on MiniWoB++ click and type tasks, held-out reward before and after GRPO,
with a 95% confidence interval over seeds.

Each seed is its own run (own run dir, own gateway with the local engine): evaluate on the
held-out problems (the bundled ``miniwob`` suite's ``test`` split: the last problem seed of
each task, a page no train problem shows), ``--steps`` GRPO steps on the train problems
(the other seeds), evaluate again. MiniWoB's own JavaScript gives each reward. There is
no SFT warm-up: no teacher trajectories exist for these pages. Target of the issue: a gain
within 60 minutes on 2 cores; ``--quick`` is a smoke run.

    .venv/bin/python bench/learning_gui.py [--quick] [--seeds 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path

from learning import ci95  # bench/learning.py, beside this file
from openforge.tasks.miniwob import SUITE_TASKS
from openforge.training.config import TrainConfig
from openforge.training.loop import run_loop
from openforge.training.session import open_session


def gui_config(run_dir: Path, seed: int, steps: int, tasks: list[str], k: int) -> TrainConfig:
    """The bench's settings: one short call per step, per-call samples, top layers trained."""
    ids = [f"miniwob/{name}/{s}" for name in tasks for s in (1, 2, 3, 4)]
    return TrainConfig(
        model="smollm2-135m",
        harness="browser-agent",
        tasks="miniwob",
        task_ids=ids,
        steps=steps,
        tasks_per_step=3,
        group_size=4,
        # Every browser-agent call is a fresh system + user prompt: one sample per call.
        sample_mode="per_call",
        async_rollouts=True,
        max_staleness=1,
        learning_rate=5e-5,
        train_layers=10,
        eval_samples=k,
        eval_temperature=0.6,
        temperature=1.0,
        max_tokens=24,
        concurrency=4,
        threads=1,
        check_tasks=False,
        seed=seed,
        rollout_options={"harness_options": {"mode": "axtree", "max_steps": 3}},
        run_dir=str(run_dir / f"seed-{seed}"),
    )


async def one_seed(cfg: TrainConfig) -> dict[str, float]:
    """Held-out reward before and after GRPO for one seed."""
    async with open_session(cfg) as env:
        summary = await run_loop(cfg, env)
    before = next(e for e in summary.evals if e["tag"] == "before")
    after = next(e for e in summary.evals if e["tag"] == "after")
    return {"before": float(before["reward_mean"]), "after": float(after["reward_mean"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, 1 step, 3 tasks")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--tasks", default=",".join(SUITE_TASKS), help="MiniWoB task names")
    ap.add_argument("--run-dir", default="runs/bench-learning-gui")
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    seeds, steps = args.seeds, args.steps
    if args.quick:
        seeds, steps, tasks = 1, 1, tasks[:3]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    started = time.perf_counter()
    root = Path(args.run_dir)
    runs = []
    for s in range(seeds):
        cfg = gui_config(root, s, steps, tasks, args.eval_samples)
        runs.append(asyncio.run(one_seed(cfg)))
    rows = [
        ("before (baseline)", [r["before"] for r in runs]),
        ("after GRPO", [r["after"] for r in runs]),
        ("gain", [r["after"] - r["before"] for r in runs]),
    ]
    print(f"held-out: MiniWoB {', '.join(tasks)} at problem seed 4 (train: seeds 1-3), "
          f"{args.eval_samples} samples each, axtree mode")  # fmt: skip
    for name, values in rows:
        mean, half = ci95(values)
        print(f"{name:18} reward {100 * mean:6.1f} ± {100 * half:.1f} points "
              f"(seeds: {', '.join(f'{100 * v:.0f}' for v in values)})")  # fmt: skip
    print(f"{seeds} seeds x {steps} GRPO steps in "
          f"{(time.perf_counter() - started) / 60:.1f} min")  # fmt: skip


if __name__ == "__main__":
    main()
