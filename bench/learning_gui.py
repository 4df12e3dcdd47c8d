"""Does a GUI policy learn? SmolLM2-135M + the built-in browser agent in accessibility-tree
mode (text only) on MiniWoB++ click and type tasks, held-out reward before training, after
an SFT warm-up and after GRPO, with a 95% confidence interval over seeds.

Each seed is its own run (own run dir, own gateway with the local engine): evaluate on the
held-out problems (the bundled ``miniwob`` suite's ``test`` split: problem seed 4 of each
task, a page no train problem shows), SFT warm-up on teacher trajectories, ``--steps``
GRPO steps on the train problems (seeds 1-3), evaluate again. MiniWoB's own JavaScript
gives every reward. Besides the overall figures, the GRPO-only gain on the held-out tasks
within the SFT policy's reach (``training/reach.py``: solved by some but not all of the SFT
evaluation's even samples, measured against its odd ones; ``--eval-samples`` >= 3), per
seed and pooled, with pass@1 after GRPO against the SFT policy's pass@k there.

The teacher: SmolLM2-135M alone almost never writes ``Action: Click [N]`` (measured: 0 of 18
rollouts), so GRPO from scratch sees no reward spread. MiniWoB ships no solutions, so
:func:`reference_actions` reads each train problem's page (the browser environment run on
the host, the same seeded page the sandbox shows) and writes the actions a careful agent
would take, for the task families whose goal names its target; they are played through a
gateway by the scripted engine as browser-agent rollouts in sandboxes, and only those the
page itself scores 1 become SFT data (``training/teacher.py``, as the claw quickstart).

    .venv/bin/python bench/learning_gui.py [--quick] [--seeds 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from intervals import ci95  # bench/intervals.py, beside this file
from openforge.environments.base import server_python
from openforge.environments.browser import BrowserEnvironment, chromium_path
from openforge.guest import bundle, command
from openforge.models.registry import resolve_model
from openforge.suites.miniwob.loader import SUITE_TASKS
from openforge.tasks.model import Task
from openforge.training.config import TrainConfig
from openforge.training.loop import LoopEnv, evaluate, run_loop
from openforge.training.reach import eval_rewards, reach_report
from openforge.training.session import open_session
from openforge.training.teacher import sft_warmup, teacher_samples


def observe(task: Task) -> dict[str, Any]:
    """The task's first page as the agent sees it (axtree), from the browser environment
    run on the host in a temporary copy of the task's workspace."""
    assert isinstance(task.gui, BrowserEnvironment)
    with tempfile.TemporaryDirectory(prefix="openforge-teacher-") as tmp:
        for rel, data in task.workspace_bytes().items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        config = {**dataclasses.asdict(task.gui), "chromium": chromium_path()}
        (Path(tmp) / "env.json").write_text(json.dumps(config))
        (Path(tmp) / "server.pyz").write_bytes(bundle("browser_server"))
        argv = command(server_python("playwright", "teacher"), "server.pyz", "--config", "env.json")
        argv += ["--port-file", "port", "--result", "result.json"]
        proc = subprocess.Popen(argv, cwd=tmp, stderr=subprocess.DEVNULL)
        try:
            port = Path(tmp) / "port"
            while not port.is_file():
                if proc.poll() is not None:
                    raise RuntimeError(f"the browser environment for {task.id} did not start")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port.read_text()}/observation?mode=axtree"
            with urllib.request.urlopen(url, timeout=60) as resp:
                obs: dict[str, Any] = json.loads(resp.read())
            return obs
        finally:
            # The server stops at its next loop turn; a kill after 10 s all the same, as a
            # hung server once held a 3-seed run for 12 min.
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def reference_actions(goal: str, elements: list[dict[str, Any]]) -> list[str] | None:
    """The browser-agent replies that do ``goal`` on this page, or None for a goal this
    teacher does not know (its verifier checks each script anyway)."""
    quoted = re.findall(r'"([^"]*)"', goal)
    named = {str(e.get("name", "")).strip(): int(e["id"]) for e in reversed(elements[1:])}
    boxes = [int(e["id"]) for e in elements if e["role"] == "textbox"]
    submit = next((int(e["id"]) for e in elements if e["role"] == "button"), None)
    if goal.startswith("Click on the") and quoted and quoted[0] in named:
        return [f"Action: Click [{named[quoted[0]]}]"]
    if goal.startswith("Click on Tab #") and goal[len("Click on ") : -1] in named:
        return [f"Action: Click [{named[goal[len('Click on ') : -1]]}]"]
    if goal.startswith("Close the dialog") and "Close" in named:
        return [f"Action: Click [{named['Close']}]"]
    if goal == "Focus into the textbox." and boxes:
        return [f"Action: Click [{boxes[0]}]"]
    if submit is None or not quoted:
        return None
    if goal.startswith('Enter "') and len(boxes) == 1:  # enter-text
        return [f"Action: Type [{boxes[0]}]; {quoted[0]}", f"Action: Click [{submit}]"]
    if goal.startswith("Enter the password") and len(boxes) == 2:
        return [*(f"Action: Type [{b}]; {quoted[0]}" for b in boxes), f"Action: Click [{submit}]"]
    if goal.startswith("Enter the username") and len(boxes) == 2 and len(quoted) == 2:
        typed = [f"Action: Type [{b}]; {q}" for b, q in zip(boxes, quoted, strict=True)]
        return [*typed, f"Action: Click [{submit}]"]
    return None


async def reference_scripts(task: Task) -> dict[str, list[dict[str, Any]]]:
    """The teacher's one variant for ``task`` (scripted replies), or none."""
    obs = await asyncio.to_thread(observe, task)
    actions = reference_actions(str(obs.get("goal", "")), list(obs.get("elements") or []))
    return {"reference": [{"text": a} for a in actions]} if actions else {}


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
        sft_epochs=3,
        sft_learning_rate=2e-4,
        seed=seed,
        rollout_options={"harness_options": {"mode": "axtree", "max_steps": 4}},
        run_dir=str(run_dir / f"seed-{seed}"),
    )


async def one_seed(cfg: TrainConfig, teach_seeds: tuple[int, ...]) -> dict[str, Any]:
    """Held-out reward before, after the SFT warm-up and after GRPO for one seed, and the
    SFT and final evaluations' rewards per task (for the tasks within reach)."""
    async with open_session(cfg) as env:
        teach = [t for t in env.train_tasks if int(t.id.rsplit("/", 1)[-1]) in teach_seeds]
        samples = await teacher_samples(cfg, teach, resolve_model(cfg.model), reference_scripts)
        sft = sft_warmup(samples)
        sft_eval: dict[str, float] = {}

        async def warmup(c: TrainConfig, e: LoopEnv) -> None:
            await sft(c, e)
            sft_eval.update(await evaluate(c, e, "sft", 0))

        summary = await run_loop(cfg, env, warmup=warmup)
    before = next(e for e in summary.evals if e["tag"] == "before")
    after = next(e for e in summary.evals if e["tag"] == "after")
    rollouts = Path(cfg.run_dir) / "rollouts"
    return {
        "before": float(before["reward_mean"]),
        "sft": float(sft_eval.get("reward_mean", float("nan"))),
        "after": float(after["reward_mean"]),
        "sft_rewards": eval_rewards(rollouts / "eval-sft"),
        "after_rewards": eval_rewards(rollouts / "eval-after"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, 1 step, 3 tasks")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument(
        "--eval-samples", type=int, default=4,
        help="samples per held-out problem (3+: the tasks within reach need 2 to choose them)",
    )  # fmt: skip
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
        runs.append(asyncio.run(one_seed(cfg, (1,) if args.quick else (1, 2))))
    rows = [
        ("before (baseline)", [r["before"] for r in runs]),
        ("after SFT", [r["sft"] for r in runs]),
        ("after SFT + GRPO", [r["after"] for r in runs]),
        ("gain (total)", [r["after"] - r["before"] for r in runs]),
        ("gain (GRPO only)", [r["after"] - r["sft"] for r in runs]),
    ]
    print(f"held-out: MiniWoB {', '.join(tasks)} at problem seed 4 (train: seeds 1-3), "
          f"{args.eval_samples} samples each, axtree mode")  # fmt: skip
    for name, values in rows:
        mean, half = ci95(values)
        print(f"{name:18} reward {100 * mean:6.1f} ± {100 * half:.1f} points "
              f"(seeds: {', '.join(f'{100 * v:.0f}' for v in values)})")  # fmt: skip
    sft, after = [r["sft_rewards"] for r in runs], [r["after_rewards"] for r in runs]
    for line in reach_report(sft, after):
        print(line)
    print(f"{seeds} seeds x (SFT + {steps} GRPO steps) in "
          f"{(time.perf_counter() - started) / 60:.1f} min")  # fmt: skip


if __name__ == "__main__":
    main()
