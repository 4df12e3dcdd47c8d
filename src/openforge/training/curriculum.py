"""A curriculum that keeps the training mix within the policy's reach.

GRPO learns only from groups with a reward spread, and a group has one most often when the
policy passes its task about half the time. The curriculum measures, as training goes, the
pass rate of each *bucket* — a skill (``training/metrics.py`` ``skills``) at a difficulty
level (claw-drill-levels' ``level-L`` tag; 0 without one) — from the group rewards the loop
already computed (the last ``window`` groups of the bucket), and draws the step's tasks
with weights:

- a bucket not yet measured, or whose rate lies in ``[low, high]``: weight 1;
- a bucket out of that band (too hard or already mastered): weight ``explore``, so its
  rate keeps being measured and it comes back once the policy has grown into it;
- level ``L`` >= 1 of a skill is locked (weight 0) until level ``L - 1`` passes above
  ``high`` or level ``L`` has been measured: harder instances open as easier ones are
  mastered.

Within a bucket, tasks take turns in a seeded shuffle. The state (each bucket's recent
rates and turns) is JSON-able and saved with the sampler in each checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from openforge.tasks.model import Task

__all__ = ["Curriculum", "bucket_name", "curriculum_skills"]


def bucket_name(skill: str, level: int) -> str:
    """How a bucket is named in metrics and logs: ``skill@level``."""
    return f"{skill}@{level}"


def _level(tags: Sequence[str]) -> int:
    # claw-drill's level tag (suites/drills/generate.py task_level), read without importing
    # a suite from training
    for tag in tags:
        if tag.startswith("level-") and tag[6:].isdigit():
            return int(tag[6:])
    return 0


def curriculum_skills(tasks: Sequence[Task]) -> dict[str, str]:
    """Each task's skill with its level tag set aside: its first tag that not every task
    carries (claw-drill's family); when all share their tags (one family selected), the
    last one; else the task id."""
    plain = {t.id: [tag for tag in t.tags if not tag.startswith("level-")] for t in tasks}
    common = set.intersection(*(set(v) for v in plain.values())) if plain else set()
    out: dict[str, str] = {}
    for task_id, tags in plain.items():
        rare = [tag for tag in tags if tag not in common]
        out[task_id] = rare[0] if rare else (tags[-1] if tags else task_id)
    return out


@dataclass(slots=True)
class Curriculum:
    """Pass rates per (skill, level) bucket and the weighted draw they steer."""

    tasks: Sequence[Task]
    skill_of: Mapping[str, str]  # task id -> skill
    seed: int = 0
    low: float = 0.2
    high: float = 0.8
    window: int = 4  # a bucket's rate: the mean pass fraction of its last this-many groups
    explore: float = 0.1  # weight of a bucket outside [low, high]
    pass_threshold: float = 1.0
    history: dict[str, list[float]] = field(default_factory=dict)  # bucket -> pass fractions
    turns: dict[str, int] = field(default_factory=dict)  # bucket -> tasks drawn from it
    _members: dict[str, list[Task]] = field(default_factory=dict)
    _bucket_of: dict[str, str] = field(default_factory=dict)
    _key: dict[str, tuple[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for task in self.tasks:
            skill, level = self.skill_of.get(task.id, task.id), _level(task.tags)
            name = bucket_name(skill, level)
            self._bucket_of[task.id] = name
            self._key[name] = (skill, level)
            self._members.setdefault(name, []).append(task)
        for name, members in self._members.items():
            random.Random(f"{self.seed}:{name}").shuffle(members)

    def bucket_of(self, task_id: str) -> str | None:
        """The bucket a task belongs to (None for a task the curriculum does not hold)."""
        return self._bucket_of.get(task_id)

    def rate(self, bucket: str) -> float | None:
        """The bucket's current pass rate; None before any of its groups was scored."""
        seen = self.history.get(bucket)
        return sum(seen) / len(seen) if seen else None

    def rates(self) -> dict[str, float]:
        """Every measured bucket's pass rate."""
        return {b: r for b in sorted(self._members) if (r := self.rate(b)) is not None}

    def weight(self, bucket: str) -> float:
        """The bucket's draw weight (see the module docstring)."""
        skill, level = self._key[bucket]
        r = self.rate(bucket)
        if r is None:
            if level == 0:
                return 1.0
            below = self.rate(bucket_name(skill, level - 1))
            return 1.0 if below is not None and below > self.high else 0.0
        return 1.0 if self.low <= r <= self.high else self.explore

    def weights(self) -> dict[str, float]:
        """Every bucket's draw weight."""
        return {b: self.weight(b) for b in sorted(self._members)}

    def observe(self, task_id: str, rewards: Sequence[float]) -> None:
        """Record a scored group of ``task_id`` (its rewards)."""
        bucket = self._bucket_of.get(task_id)
        if bucket is None or not rewards:
            return
        passed = sum(1 for r in rewards if r >= self.pass_threshold) / len(rewards)
        self.history[bucket] = [*self.history.get(bucket, []), passed][-self.window :]

    def draw(self, k: int, cursor: int, usable: Callable[[Task], bool]) -> list[Task]:
        """``k`` distinct tasks drawn bucket by bucket with the weights, the randomness seeded
        by ``seed`` and ``cursor``: ``usable`` ones (not resting) first, then others, then —
        so that a step never starves — any task of an unlocked bucket, out-of-band ones
        included even with ``explore`` 0. Fewer only when the unlocked buckets hold fewer."""
        rng = random.Random(f"{self.seed}:draw:{cursor}")
        taken: set[str] = set()
        out: list[Task] = []
        weights = self.weights()
        unlocked = {
            b: 1.0
            for b in weights
            if weights[b] > 0 or self._key[b][1] == 0 or self.rate(b) is not None
        }
        passes: tuple[tuple[dict[str, float], Callable[[Task], bool] | None], ...] = (
            (weights, usable),
            (weights, None),
            (unlocked, None),
        )
        for weighed, only in passes:
            while len(out) < k:
                open_ = {
                    b: w
                    for b, w in weighed.items()
                    if w > 0 and self._next(b, taken, only) is not None
                }
                if not open_:
                    break
                names = sorted(open_)
                bucket = rng.choices(names, [open_[b] for b in names])[0]
                task = self._next(bucket, taken, only)
                assert task is not None
                self.turns[bucket] = self.turns.get(bucket, 0) + 1
                taken.add(task.id)
                out.append(task)
        return out

    def _next(
        self, bucket: str, taken: set[str], usable: Callable[[Task], bool] | None
    ) -> Task | None:
        """The bucket's next task in turn that is not taken (and usable, when asked)."""
        members = self._members[bucket]
        start = self.turns.get(bucket, 0)
        for i in range(len(members)):
            task = members[(start + i) % len(members)]
            if task.id not in taken and (usable is None or usable(task)):
                return task
        return None

    def state(self) -> dict[str, object]:
        """The buckets' recent pass fractions and turns, for a checkpoint."""
        return {"history": {b: list(v) for b, v in self.history.items()}, "turns": dict(self.turns)}

    def load(self, state: object) -> None:
        """Restore :meth:`state`'s output; a damaged record restores nothing."""
        if not isinstance(state, dict):
            return
        history, turns = state.get("history"), state.get("turns")
        try:
            if isinstance(history, dict):
                self.history = {
                    str(b): [float(x) for x in v][-self.window :] for b, v in history.items()
                }
            if isinstance(turns, dict):
                self.turns = {str(b): int(v) for b, v in turns.items()}
        except (TypeError, ValueError):
            self.history, self.turns = {}, {}
