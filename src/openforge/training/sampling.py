"""Which train tasks a GRPO step rolls out: epochs over the tasks in seeded shuffles, with
DAPO-style dynamic sampling's task filter.

A group whose ``G`` rewards are all equal (every rollout passed, or every one failed) has
zero advantage everywhere and teaches nothing; DAPO (Yu et al., 2025, §3.2) keeps sampling
until the batch holds enough groups with a reward spread. The sampler adds the cheap half
of that idea up front: a task whose last group had no spread *rests* for ``rest_steps``
steps (it is too easy or too hard for the current policy), so its rollouts go to tasks the
policy sometimes solves. Resting ends on its own, so a task the policy has outgrown or
grown into comes back.

The sampler's state (cursor and resting tasks) is a small JSON-able dict, saved with each
checkpoint, so a resumed run draws the same tasks again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from openforge.tasks.model import Task

__all__ = ["TaskSampler", "has_spread"]


def has_spread(rewards: Sequence[float], min_spread: float = 1e-8) -> bool:
    """True when a group's rewards differ (the group carries a GRPO signal)."""
    return len(rewards) >= 2 and max(rewards) - min(rewards) > min_spread


@dataclass(slots=True)
class TaskSampler:
    """Draws train tasks in seeded epochs, skipping tasks that are resting.

    ``cursor`` counts draws from the start of the run; draw ``i`` is position ``i mod n``
    of epoch ``i // n``'s shuffle (seeded by ``seed`` and the epoch), as
    :func:`~openforge.training.loop.tasks_for_step` has always ordered them.
    """

    tasks: Sequence[Task]
    seed: int
    rest_steps: int = 0  # 0: never rest (plain epochs)
    cursor: int = 0
    resting: dict[str, int] = field(default_factory=dict)  # task id -> step it was uniform

    def at(self, i: int) -> Task:
        """Draw number ``i`` of the plain order (resting ignored)."""
        n = len(self.tasks)
        epoch, pos = divmod(i, n)
        order = list(range(n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.tasks[order[pos]]

    def is_resting(self, task_id: str, step: int) -> bool:
        """A task rests for ``rest_steps`` steps after the step its group had no spread."""
        since = self.resting.get(task_id)
        return since is not None and step - since <= self.rest_steps

    def draw(self, k: int, step: int) -> list[Task]:
        """``k`` distinct tasks (fewer only when the suite has fewer), not resting ones
        unless every task rests (then the plain order, so a step never starves)."""
        if not self.tasks or k <= 0:
            return []
        k = min(k, len(self.tasks))
        out: list[Task] = []
        taken: set[str] = set()
        for _ in range(2 * len(self.tasks)):  # at most two epochs' worth of look-ahead
            task = self.at(self.cursor)
            self.cursor += 1
            if task.id in taken or self.is_resting(task.id, step):
                continue
            out.append(task)
            taken.add(task.id)
            if len(out) == k:
                return out
        while len(out) < k:  # everything rests: take the next ones anyway
            task = self.at(self.cursor)
            self.cursor += 1
            if task.id not in taken:
                out.append(task)
                taken.add(task.id)
        return out

    def observe(self, groups: Iterable[tuple[str, Sequence[float]]], step: int) -> int:
        """Record each ``(task id, rewards)`` group of ``step``; returns how many had a
        spread. A uniform group puts its task to rest (when ``rest_steps`` > 0)."""
        kept = 0
        for task_id, rewards in groups:
            if has_spread(rewards):
                kept += 1
                self.resting.pop(task_id, None)
            elif self.rest_steps > 0 and rewards:
                self.resting[task_id] = step
        return kept

    def resting_now(self, step: int) -> int:
        """How many tasks rest at ``step``."""
        return sum(1 for t in self.resting if self.is_resting(t, step))

    def state(self) -> dict[str, object]:
        """The cursor and the resting tasks, for a checkpoint."""
        return {"cursor": self.cursor, "resting": dict(self.resting)}

    def load(self, state: dict[str, object]) -> None:
        """Restore :meth:`state`'s output (a checkpoint's)."""
        cursor = state.get("cursor", 0)
        resting = state.get("resting", {})
        self.cursor = int(cursor) if isinstance(cursor, int) else 0
        self.resting = (
            {str(k): int(v) for k, v in resting.items()} if isinstance(resting, dict) else {}
        )
