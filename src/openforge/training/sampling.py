"""Which train tasks a GRPO step rolls out: epochs over the tasks in seeded shuffles, with
DAPO-style dynamic sampling's task filter.

A group whose ``G`` rewards are all equal (every rollout passed, or every one failed) has
zero advantage everywhere and teaches nothing; DAPO (Yu et al., 2025, §3.2) keeps sampling
until the batch holds enough groups with a reward spread. The sampler adds the cheap half
of that idea up front: a task whose last group had no spread *rests* for ``rest_steps``
steps (it is too easy or too hard for the current policy), so its rollouts go to tasks the
policy sometimes solves. Resting ends on its own, so a task the policy has outgrown or
grown into comes back.

A skill can rest as a whole (``skill_rest_after``): a task's group says little about its
siblings, but when a skill's last N groups, over any of its tasks, were all uniform, the
policy neither solves nor misses it by chance, and its other tasks would most likely be
rolled out for nothing too. On claw-drill after the warm-up, five of 17 skills took
about 31% of GRPO's rollouts while giving 6 of ~120 groups with a spread (docs/training.md).
One group with a spread, from any of its tasks, ends a skill's rest.

With a curriculum (``training/curriculum.py``), the draw is weighted by each skill and
difficulty's current pass rate instead of following the epochs; resting still applies.

The sampler's state (cursor, resting tasks, the skills' uniform runs and rests, the
curriculum's rates) is a small JSON-able dict, saved with each checkpoint, so a resumed run
draws the same tasks again.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from openforge.tasks.model import Task
from openforge.training.curriculum import Curriculum

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
    skill_of: Mapping[str, str] = field(default_factory=dict)  # task id -> its skill
    skill_rest_after: int = 0  # N uniform groups in a row rest the whole skill; 0: never
    uniform_run: dict[str, int] = field(default_factory=dict)  # skill -> uniform groups in a row
    skills_resting: dict[str, int] = field(default_factory=dict)  # skill -> step it was put to rest
    curriculum: Curriculum | None = None  # None: plain epochs

    def at(self, i: int) -> Task:
        """Draw number ``i`` of the plain order (resting ignored)."""
        n = len(self.tasks)
        epoch, pos = divmod(i, n)
        order = list(range(n))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return self.tasks[order[pos]]

    def is_resting(self, task_id: str, step: int) -> bool:
        """A task rests for ``rest_steps`` steps after the step its group had no spread,
        or after the step its skill's ``skill_rest_after``-th uniform group in a row."""
        if self._rests(self.resting.get(task_id), step):
            return True
        skill = self.skill_of.get(task_id)
        return skill is not None and self._rests(self.skills_resting.get(skill), step)

    def _rests(self, since: int | None, step: int) -> bool:
        """Whether a rest that began at step ``since`` (None: none began) lasts to ``step``."""
        return since is not None and step - since <= self.rest_steps

    def draw(self, k: int, step: int) -> list[Task]:
        """``k`` distinct tasks (fewer only when the suite has fewer), not resting ones
        unless every task rests (then the plain order, so a step never starves)."""
        if not self.tasks or k <= 0:
            return []
        k = min(k, len(self.tasks))
        if self.curriculum is not None:
            drawn = self.curriculum.draw(k, self.cursor, lambda t: not self.is_resting(t.id, step))
            self.cursor += len(drawn)
            return drawn
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
        spread. A uniform group puts its task to rest (when ``rest_steps`` > 0), and its
        skill too when it is the skill's ``skill_rest_after``-th uniform group in a row."""
        kept = 0
        for task_id, rewards in groups:
            if self.curriculum is not None:
                self.curriculum.observe(task_id, rewards)
            skill = self.skill_of.get(task_id)
            if has_spread(rewards):
                kept += 1
                self.resting.pop(task_id, None)
                if skill is not None:
                    self.uniform_run.pop(skill, None)
                    self.skills_resting.pop(skill, None)
            elif self.rest_steps > 0 and rewards:
                self.resting[task_id] = step
                if skill is not None and self.skill_rest_after > 0:
                    run = self.uniform_run[skill] = self.uniform_run.get(skill, 0) + 1
                    if run >= self.skill_rest_after:
                        self.skills_resting[skill] = step
        return kept

    def resting_now(self, step: int) -> int:
        """How many tasks rest at ``step`` (on their own or with their skill)."""
        return sum(1 for t in self.tasks if self.is_resting(t.id, step))

    def skills_resting_now(self, step: int) -> int:
        """How many skills rest as a whole at ``step``."""
        return sum(1 for since in self.skills_resting.values() if self._rests(since, step))

    def state(self) -> dict[str, object]:
        """The cursor, the resting tasks and the skills' runs and rests, for a checkpoint."""
        state: dict[str, object] = {
            "cursor": self.cursor,
            "resting": dict(self.resting),
            "uniform_run": dict(self.uniform_run),
            "skills_resting": dict(self.skills_resting),
        }
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state()
        return state

    def load(self, state: dict[str, object]) -> None:
        """Restore :meth:`state`'s output (a checkpoint's; one saved before skills rested
        restores with none resting)."""
        cursor = state.get("cursor", 0)
        self.cursor = int(cursor) if isinstance(cursor, int) else 0
        self.resting = _steps(state.get("resting"))
        self.uniform_run = _steps(state.get("uniform_run"))
        self.skills_resting = _steps(state.get("skills_resting"))
        if self.curriculum is not None:
            self.curriculum.load(state.get("curriculum"))


def _steps(value: object) -> dict[str, int]:
    """A checkpoint's ``{name: int}`` record; a damaged one reads as empty."""
    if not isinstance(value, dict):
        return {}
    try:
        return {str(k): int(v) for k, v in value.items()}
    except (TypeError, ValueError):
        return {}
