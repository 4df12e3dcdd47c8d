"""GRPO advantages over the ``G`` rollouts of one task (Shao et al., 2024, §4.1.2).

For a group of ``G`` rollouts of the same task with rewards ``r_1 … r_G``::

    Â_i = (r_i − mean(r)) / scale,    scale = 1            (scale="none", Dr. GRPO)
                                      scale = std(r) + ε   (scale="std",  GRPO)

``Â_i`` is given to every trained token of rollout ``i`` (outcome supervision). A
group whose rewards are all equal carries no learning signal (every ``Â_i`` is 0);
it is dropped and counted, so the step's token normaliser is not diluted by it.

One exception, off by default: a *solved* group (every rollout earned the full reward)
carries no GRPO signal either, yet the weights it shares with the other tasks move under
their updates and can unlearn it. With ``solved_advantage > 0`` the first
``uniform_rollouts`` of such a group get that small constant advantage: self-imitation on
what the policy already does right (Oh et al., 2018), an anchor whose gradient is small
where the policy is already confident and grows as it drifts away.

With a KL term (``kl_anchor``: ``kl_coef > 0``) the first ``uniform_rollouts`` of every
other uniform group are kept too, with advantage 0: GRPO as published (Shao et al.) puts
β·KL on every sampled output, and a skill whose groups all fail is exactly the one whose
prompts the other tasks' updates can wreck unseen (docs/training.md: ``count-lines``
0.53 → 0 as ``count-words`` was learned). Dropping them, as DAPO (which has no KL) does,
would leave the KL blind there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "FULL_REWARD",
    "AdvantageScale",
    "GroupAdvantages",
    "group_advantages",
    "grpo_advantages",
]

AdvantageScale = Literal["none", "std"]

# A verifier's reward lies in [0, 1] (tasks/verify.py refuses others); 1: nothing missing.
FULL_REWARD = 1.0


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
    solved_groups: int = 0  # all at the full reward, anchored with solved_advantage
    kl_only_groups: int = 0  # other uniform groups kept with advantage 0 for the KL term
    singleton_groups: int = 0  # one rollout: no baseline, dropped


def grpo_advantages(
    scored: Iterable[tuple[str, str, float]],
    scale: AdvantageScale = "std",
    eps: float = 1e-6,
    min_spread: float = 1e-8,
    solved_advantage: float = 0.0,
    uniform_rollouts: int = 2,
    kl_anchor: bool = False,
) -> GroupAdvantages:
    """GRPO advantages for ``(group_id, rollout_id, reward)`` triples.

    Groups with fewer than two rollouts, or whose reward range is ≤ ``min_spread``,
    are dropped (their rollouts get no advantage) and counted; with ``solved_advantage``
    > 0, a uniform group at :data:`FULL_REWARD` gives that advantage to its first
    ``uniform_rollouts`` rollouts instead (counted in ``solved_groups``, not dropped); with
    ``kl_anchor``, any other uniform group keeps its first ``uniform_rollouts`` rollouts
    at advantage 0 for the KL term (counted in ``zero_variance_groups`` and
    ``kl_only_groups``).
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
            if solved_advantage > 0 and min(rewards) >= FULL_REWARD:
                out.solved_groups += 1
                for rollout_id, _ in members[:uniform_rollouts]:
                    out.advantages[rollout_id] = solved_advantage
                continue
            out.zero_variance_groups += 1
            if kl_anchor:
                out.kl_only_groups += 1
                for rollout_id, _ in members[:uniform_rollouts]:
                    out.advantages[rollout_id] = 0.0
            continue
        out.kept_groups += 1
        advs = group_advantages(rewards, scale, eps)
        for (rollout_id, _), adv in zip(members, advs, strict=True):
            out.advantages[rollout_id] = adv
    return out
