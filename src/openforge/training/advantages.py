"""GRPO advantages over the ``G`` rollouts of one task (Shao et al., 2024, §4.1.2).

For a group of ``G`` rollouts of the same task with rewards ``r_1 … r_G``::

    Â_i = (r_i − mean(r)) / scale,    scale = 1            (scale="none", Dr. GRPO)
                                      scale = std(r) + ε   (scale="std",  GRPO)

``Â_i`` is given to every trained token of rollout ``i`` (outcome supervision). A
group whose rewards are all equal carries no learning signal (every ``Â_i`` is 0);
it is dropped and counted, so the step's token normaliser is not diluted by it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["AdvantageScale", "GroupAdvantages", "group_advantages", "grpo_advantages"]

AdvantageScale = Literal["none", "std"]


def group_advantages(
    rewards: Sequence[float], scale: AdvantageScale = "std", eps: float = 1e-6
) -> list[float]:
    """``Â_i = (r_i − mean(r)) / scale`` for one group; ``std`` is the population std.

    >>> group_advantages([1.0, 0.0], scale="none")
    [0.5, -0.5]
    """
    if not rewards:
        return []
    g = len(rewards)
    mean = sum(rewards) / g
    centred = [r - mean for r in rewards]
    if scale == "none":
        return centred
    std = math.sqrt(sum(c * c for c in centred) / g)
    return [c / (std + eps) for c in centred]


@dataclass(slots=True)
class GroupAdvantages:
    """Advantages by rollout id, and what was left out and why."""

    advantages: dict[str, float] = field(default_factory=dict)
    kept_groups: int = 0
    zero_variance_groups: int = 0  # all rewards equal: no signal, dropped
    singleton_groups: int = 0  # one rollout: no baseline, dropped


def grpo_advantages(
    scored: Iterable[tuple[str, str, float]],
    scale: AdvantageScale = "std",
    eps: float = 1e-6,
    min_spread: float = 1e-8,
) -> GroupAdvantages:
    """GRPO advantages for ``(group_id, rollout_id, reward)`` triples.

    Groups with fewer than two rollouts, or whose reward range is ≤ ``min_spread``,
    are dropped (their rollouts get no advantage) and counted.
    """
    groups: dict[str, list[tuple[str, float]]] = {}
    for group_id, rollout_id, reward in scored:
        groups.setdefault(group_id, []).append((rollout_id, reward))
    out = GroupAdvantages()
    for members in groups.values():
        rewards = [r for _, r in members]
        if len(members) < 2:
            out.singleton_groups += 1
            continue
        if max(rewards) - min(rewards) <= min_spread:
            out.zero_variance_groups += 1
            continue
        out.kept_groups += 1
        advs = group_advantages(rewards, scale, eps)
        for (rollout_id, _), adv in zip(members, advs, strict=True):
            out.advantages[rollout_id] = adv
    return out
