"""Reading a store into rollout plans and samples (async, like every store read)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from openforge.store.location import open_store as _open_location
from openforge.store.schemas import (
    TRAIN_SPLIT,
    TRAINING,
    Blob,
    CallRecord,
    FlagSeverity,
    Rollout,
    RolloutSelection,
    RolloutStatus,
)
from openforge.traces.samples import (
    FlagPolicy,
    Mode,
    RolloutPlan,
    Sample,
    TraceCounts,
    TraceOptions,
    plan_groups,
    plan_rollout,
)

__all__ = [
    "CallSource",
    "HeldOutError",
    "StorePlan",
    "iter_plans",
    "iter_samples",
    "load_blobs",
    "open_store",
    "plan_rollouts",
    "plan_store",
]


class CallSource(Protocol):
    """What reading traces needs of a store (every :class:`~openforge.store.base.Store`
    has it): training and the CLI read calls through this, never the store's writes."""

    async def get_rollout(self, rollout_id: str) -> Rollout: ...

    async def calls(self, rollout_id: str, tokens: bool = True) -> list[CallRecord]: ...

    async def rollouts(
        self,
        statuses: Sequence[RolloutStatus] | None = None,
        group_id: str | None = None,
        selection: RolloutSelection | None = None,
    ) -> list[Rollout]: ...

    async def get_blob(self, sha256: str) -> Blob | None: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class StorePlan:
    """Every rollout's plan, the ones that keep samples, and the summed counters."""

    plans: list[RolloutPlan]
    kept: list[RolloutPlan]
    counts: TraceCounts = field(default_factory=TraceCounts)

    @property
    def samples(self) -> list[Sample]:
        return [s for p in self.kept for s in p.samples]


class HeldOutError(ValueError):
    """A held-out rollout was about to become training data."""


def open_store(location: str | Path) -> CallSource:
    """Open an existing store for reading: a SQLite file (a missing one is refused, not
    created) or a ``postgresql://`` URL.

    Raises :class:`FileNotFoundError`, or the store's ``SchemaMismatch`` for a store of
    another schema version (its message says what to do).
    """
    return _open_location(location, create=False)


async def plan_rollouts(
    source: CallSource,
    rollout_ids: Sequence[str],
    options: TraceOptions,
    rewards: Mapping[str, float] | None = None,
    allow_held_out: bool = False,
) -> list[RolloutPlan]:
    """The plans of the given rollouts, in order (no group-level filtering).

    ``rewards`` fills in a reward the store does not have yet (a finish in flight).
    Raises :class:`HeldOutError` for a rollout of a held-out split (any but ``train`` and
    unrecorded) unless ``allow_held_out``: these plans are training data.
    """
    plans: list[RolloutPlan] = []
    for rollout_id in rollout_ids:
        rollout = await source.get_rollout(rollout_id)
        if rollout.split not in (TRAIN_SPLIT, None) and not allow_held_out:
            raise HeldOutError(
                f"rollout {rollout.id} (task {rollout.task_id}) is held out (split "
                f"{rollout.split}): it must not be trained on"
            )
        reward = (rewards or {}).get(rollout_id)
        if rollout.reward is None and reward is not None:
            rollout = dataclasses.replace(rollout, reward=reward)  # not the store's cached one
        plans.append(plan_rollout(rollout, await source.calls(rollout.id), options))
    return plans


async def load_blobs(source: CallSource, digests: Iterable[str]) -> dict[str, Blob]:
    """The store's blobs (images) with these digests, each read once.

    Raises :class:`LookupError` naming a digest the store does not hold: a sample whose
    image is gone cannot be trained on, and silently dropping the image would misplace
    every placeholder after it.
    """
    out: dict[str, Blob] = {}
    for digest in dict.fromkeys(digests):
        blob = await source.get_blob(digest)
        if blob is None:
            raise LookupError(f"image sha256:{digest} is referenced by a call but not stored")
        out[digest] = blob
    return out


def _key(r: Rollout) -> str:
    return r.group_id if r.group_id is not None else f"rollout:{r.id}"


async def iter_plans(
    store: CallSource,
    options: TraceOptions | None = None,
    statuses: Sequence[RolloutStatus] | None = None,
    selection: RolloutSelection | None = None,
) -> AsyncIterator[list[RolloutPlan]]:
    """Yield the plans of one group at a time (all of them, kept or not), oldest group first.

    Groups are planned whole so that ``min_group_size`` can drop a group entirely.
    ``selection``: only these runs, splits and tasks (None: every rollout).
    """
    options = options or TraceOptions()
    rollouts = await store.rollouts(statuses=statuses, selection=selection)
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(_key(r), []).append(r)
    for members in groups.values():
        plans = [plan_rollout(r, await store.calls(r.id), options) for r in members]
        plan_groups(plans, options)
        yield plans


async def iter_samples(
    store: CallSource,
    mode: Mode | str = Mode.AUTO,
    *,
    include_running: bool = False,
    mask_forks: bool = False,
    require_reward: bool = True,
    min_group_size: int = 1,
    flagged: FlagPolicy | str = FlagPolicy.DROP,
    flag_severity: FlagSeverity | str = FlagSeverity.MEDIUM,
    selection: RolloutSelection | None = TRAINING,
) -> AsyncIterator[Sample]:
    """The store's training samples, group by group (a group's samples are contiguous).

    ``async for sample in iter_samples(store, "merged"): ...`` (``auto``: per-call for
    rollouts with images, merged otherwise). Defaults suit RL: rollouts
    must be finished and scored; ``infra_error`` rollouts and failed calls give nothing,
    and neither do rollouts the reward-hack monitor flagged at medium severity or above.
    Only training rollouts (split ``train``, or none recorded) by default: a held-out
    rollout is never a sample unless ``selection`` asks for it.
    """
    options = TraceOptions(
        mode=Mode(mode),
        include_running=include_running,
        mask_forks=mask_forks,
        require_reward=require_reward,
        min_group_size=min_group_size,
        flagged=FlagPolicy(flagged),
        flag_severity=FlagSeverity(flag_severity),
    )
    async for plans in iter_plans(store, options, selection=selection):
        for p in plans:
            for s in p.samples:
                yield s


async def plan_store(
    store: CallSource,
    options: TraceOptions | None = None,
    selection: RolloutSelection | None = None,
) -> StorePlan:
    """Plan every rollout of ``store`` (of ``selection``: None takes all); counters summed
    over all of them."""
    out = StorePlan([], [])
    async for plans in iter_plans(store, options, selection=selection):
        for p in plans:
            out.plans.append(p)
            out.counts.add(p.counts)
            if p.excluded is None:
                out.kept.append(p)
    return out
