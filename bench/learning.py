"""Does the policy learn? SmolLM2-135M + the claw agent on claw-mini, held-out reward before
and after N GRPO steps, with a 95% confidence interval over seeds.

Each seed is a full run (own run dir, own gateway): evaluate on the test split, train
``--steps`` steps on the train split, evaluate again. The baseline is the same model before
training, measured in the same run. Target: +15 points within 60 minutes on 2 cores.

    .venv/bin/python bench/learning.py [--quick] [--seeds 3] [--steps 8]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import statistics
import time
from pathlib import Path

from openforge.training.loop import run_loop
from openforge.training.quickstart import quickstart_config
from openforge.training.session import open_session


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of a t-interval (normal approximation past 30 values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    t = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36}.get(len(values), 2.0)
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))


async def one_seed(seed: int, steps: int, root: Path, quick: bool) -> tuple[float, float]:
    cfg = quickstart_config(str(root / f"seed-{seed}"), steps)
    cfg = dataclasses.replace(cfg, seed=seed, eval_samples=1 if quick else 4)
    async with open_session(cfg) as env:
        summary = await run_loop(cfg, env)
    before = next(e for e in summary.evals if e["tag"] == "before")
    after = next(e for e in summary.evals if e["tag"] == "after")
    return float(before["reward_mean"]), float(after["reward_mean"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, 2 steps, 1 eval sample")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--run-dir", default="runs/bench-learning")
    args = ap.parse_args()
    seeds, steps = (1, 2) if args.quick else (args.seeds, args.steps)
    started = time.perf_counter()
    pairs = [asyncio.run(one_seed(s, steps, Path(args.run_dir), args.quick)) for s in range(seeds)]
    before, after = [p[0] for p in pairs], [p[1] for p in pairs]
    gain = [a - b for b, a in pairs]
    for name, values in (("before (baseline)", before), ("after", after), ("gain", gain)):
        mean, half = ci95(values)
        print(f"{name:18} held-out reward {100 * mean:6.1f} ± {100 * half:.1f} points")
    print(f"{seeds} seeds x {steps} steps in {(time.perf_counter() - started) / 60:.1f} min "
          "(target: gain >= 15 points within 60 min)")  # fmt: skip


if __name__ == "__main__":
    main()
