"""A training run's ``summary.json``: its evaluations and what it cost, per phase.

The cost is read back from what the run left in its directory, so it covers a resumed run's
earlier attempts too: every ``results.jsonl`` (each rollout's sandbox time and engine tokens
by role; ``teacher/`` rollouts count as the teacher's, ``rollouts/eval-*`` as evaluation,
``rollouts/step-*`` as GRPO rollouts) and ``metrics.jsonl`` (trainer tokens and the wall time
of each update, SFT pass, weight push and evaluation).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openforge.rollouts.cost import Prices, RunCost
from openforge.rollouts.orchestrator import load_results

__all__ = ["run_cost", "write_summary"]

# metrics.jsonl keys → the phase their seconds belong to
_PHASE_KEYS = (
    ("train", "rollout_s", "GRPO rollouts"),
    ("skip", "rollout_s", "GRPO rollouts"),
    ("train", "train_s", "GRPO updates"),
    ("train", "sync_export_s", "weight sync"),
    ("train", "sync_load_s", "weight sync"),
    ("sft", "train_s", "SFT updates"),
    ("eval", "eval_s", "evaluation"),
)


def run_cost(run_dir: str | Path, records: Sequence[dict[str, Any]], wall_s: float) -> RunCost:
    """The run's totals from its directory and its metrics ``records``."""
    root = Path(run_dir)
    cost = RunCost(wall_s=wall_s)
    teacher_dir = root / "teacher" / "rollouts"
    for path in sorted(root.glob("**/results.jsonl")):
        results = load_results(path.parent).values()
        is_teacher = teacher_dir in path.parents
        cost.add_results(results, role="teacher" if is_teacher else None)
        if is_teacher:  # the teacher plays one rollout at a time: its sandbox time is wall
            cost.add_phase("teacher", sum(r.timings.get("total", 0.0) for r in results))
    for r in records:
        for kind, key, phase in _PHASE_KEYS:
            value = r.get(key)
            if r.get("kind") == kind and isinstance(value, int | float):
                cost.add_phase(phase, float(value))
        if r.get("kind") in ("train", "sft") and isinstance(r.get("tokens"), int | float):
            cost.trainer_tokens += int(r["tokens"])
    return cost


def write_summary(
    run_dir: str | Path,
    records: Sequence[dict[str, Any]],
    wall_s: float,
    prices: Prices | None = None,
) -> tuple[Path, RunCost]:
    """Write ``summary.json`` (evaluations and cost) into the run directory."""
    cost = run_cost(run_dir, records, wall_s)
    evals = [
        {k: r.get(k) for k in ("tag", "version", "reward_mean", "pass_rate", "per_skill")}
        for r in records
        if r.get("kind") == "eval"
    ]
    body = {
        "written_at": time.time(),
        "steps": sum(1 for r in records if r.get("kind") in ("train", "skip")),
        "evaluations": evals,
        "cost": cost.as_dict(prices),
    }
    out = Path(run_dir) / "summary.json"
    out.write_text(json.dumps(body, indent=1))
    return out, cost
