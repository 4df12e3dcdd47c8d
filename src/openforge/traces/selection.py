"""Which rollouts the ``traces`` commands read: by run, split and task, training rollouts
by default, and what a selection leaves out or would let into training data."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from openforge.store.schemas import TRAIN_SPLIT, TRAINING, Rollout, RolloutSelection

__all__ = [
    "ALL_SPLITS",
    "UNRECORDED",
    "SplitCounts",
    "held_out_message",
    "parse_selection",
    "split_counts",
]

# ``--split all`` takes every split; ``--split none`` the rollouts whose split no one recorded.
ALL_SPLITS = "all"
UNRECORDED = "none"


def parse_selection(
    runs: Sequence[str] | None, splits: Sequence[str] | None, tasks: Sequence[str] | None
) -> RolloutSelection:
    """The selection the ``--run``, ``--split`` and ``--task`` options ask for; no
    ``--split`` takes the training rollouts (split ``train``, or none recorded)."""
    chosen: tuple[str | None, ...]
    if not splits:
        chosen = TRAINING.splits
    elif ALL_SPLITS in splits:
        chosen = ()
    else:
        chosen = tuple(dict.fromkeys(None if s == UNRECORDED else s for s in splits))
    runs_ = tuple(dict.fromkeys(runs or ()))
    return RolloutSelection(runs=runs_, splits=chosen, tasks=tuple(dict.fromkeys(tasks or ())))


def _split_name(split: str | None) -> str:
    return UNRECORDED if split is None else split


@dataclass(frozen=True, slots=True)
class SplitCounts:
    """Rollouts by split: those a selection takes and those it leaves out."""

    taken: Counter[str]
    left_out: Counter[str]

    @property
    def held_out_taken(self) -> Counter[str]:
        """Taken rollouts of a held-out split (every split but ``train`` and unrecorded)."""
        return Counter({s: n for s, n in self.taken.items() if s not in (TRAIN_SPLIT, UNRECORDED)})

    def line(self) -> str:
        """One line: how many rollouts are taken, by split, and what is left out."""

        def fmt(c: Counter[str]) -> str:
            return ", ".join(f"{s} {n}" for s, n in sorted(c.items())) or "no rollouts"

        out = f"rollouts taken by split: {fmt(self.taken)}"
        if self.left_out:
            out += f"; left out: {fmt(self.left_out)}"
            if set(self.left_out) - set(self.taken):  # whole splits the selection skipped
                out += " (--split SPLIT or --split all to take them)"
        return out


def split_counts(every: Sequence[Rollout], taken: Sequence[Rollout]) -> SplitCounts:
    """Counts by split of ``taken`` and of the rest of ``every``."""
    ids = {r.id for r in taken}
    return SplitCounts(
        Counter(_split_name(r.split) for r in taken),
        Counter(_split_name(r.split) for r in every if r.id not in ids),
    )


def held_out_message(counts: SplitCounts, what: str, flag: str) -> str | None:
    """Why ``what`` is refused when the selection takes held-out rollouts; None when it
    takes none."""
    held = counts.held_out_taken
    if not held:
        return None
    shown = ", ".join(f"{s} {n}" for s, n in sorted(held.items()))
    return (
        f"{sum(held.values())} held-out rollouts ({shown}) would enter {what}: evaluation "
        f"data must not be trained on. Leave --split out (training rollouts only), or pass "
        f"{flag} to use them anyway"
    )
