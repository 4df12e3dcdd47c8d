"""Run metrics: one JSON line per record in ``metrics.jsonl``; the scalars in TensorBoard too."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from openforge.rollouts.metrics import pass_at_k
from openforge.tasks.model import Task

__all__ = [
    "MetricsWriter",
    "RecordListener",
    "mean_by_skill",
    "reward_summary",
    "rewards_by_skill",
    "skills",
]


def reward_summary(
    by_task: Mapping[str, Sequence[float]], pass_threshold: float = 1.0, ks: Iterable[int] = (1,)
) -> dict[str, float]:
    """Mean reward, pass rate and pass@k (averaged over tasks) for rewards grouped by task."""
    rewards = [r for rs in by_task.values() for r in rs]
    out: dict[str, float] = {
        "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "pass_rate": (
            sum(1 for r in rewards if r >= pass_threshold) / len(rewards) if rewards else 0.0
        ),
        "tasks": float(len(by_task)),
        "rollouts": float(len(rewards)),
    }
    for k in ks:
        scores = [
            pass_at_k(len(rs), sum(1 for r in rs if r >= pass_threshold), min(k, len(rs)))
            for rs in by_task.values()
            if rs
        ]
        out[f"pass@{k}"] = sum(scores) / len(scores) if scores else 0.0
    return out


def skills(tasks: Iterable[Task]) -> dict[str, str]:
    """Each task's skill: its first tag that not every task carries (claw-drill's skill
    family; a suite's category), else the task id."""
    tasks = list(tasks)
    common = set.intersection(*(set(t.tags) for t in tasks)) if tasks else set()
    return {t.id: next((tag for tag in t.tags if tag not in common), t.id) for t in tasks}


def rewards_by_skill(
    by_tasks: Iterable[Mapping[str, Sequence[float]]], skill_of: Mapping[str, str]
) -> dict[str, list[float]]:
    """Every reward of each skill's tasks, over one or more evaluations' ``by_task``
    (a task not in ``skill_of`` is its own skill)."""
    pooled: dict[str, list[float]] = {}
    for by_task in by_tasks:
        for task_id, rewards in by_task.items():
            pooled.setdefault(skill_of.get(task_id, task_id), []).extend(rewards)
    return pooled


def mean_by_skill(
    by_task: Mapping[str, Sequence[float]], skill_of: Mapping[str, str]
) -> dict[str, float]:
    """Mean reward per skill over every rollout of its tasks."""
    pooled = rewards_by_skill([by_task], skill_of)
    return {s: sum(rs) / len(rs) for s, rs in sorted(pooled.items()) if rs}


RecordListener = Callable[[dict[str, Any]], None]


class MetricsWriter:
    """Appends records to ``<run_dir>/metrics.jsonl``; scalars also go to TensorBoard."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._tb: Any = None
        # Called with every record written (the CLI's progress bar listens here).
        self.listeners: list[RecordListener] = []
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))

    def write(self, kind: str, step: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """Record ``values`` as a ``kind`` ("train", "eval", "skip") record at ``step``."""
        record = {"kind": kind, "step": step, "time": time.time(), **values}
        with self.path.open("a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        if self._tb is not None:
            for key, value in values.items():
                number = isinstance(value, int | float) and not isinstance(value, bool)
                if number and math.isfinite(float(value)):
                    self._tb.add_scalar(f"{kind}/{key}", float(value), step)
            self._tb.flush()
        for listener in self.listeners:
            listener(record)
        return record

    def read(self) -> list[dict[str, Any]]:
        """Every record written so far (this run and earlier ones in the same dir)."""
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
