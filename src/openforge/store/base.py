"""The store interface: durable rollouts, calls and content-addressed blobs (images).

SQLite (:mod:`openforge.store.sqlite`) is the embedded default; PostgreSQL
(:mod:`openforge.store.postgres`) is shared by several gateway replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from openforge.store.errors import RolloutConflict, RolloutNotFound, StoreError
from openforge.store.rows import RequestColumns
from openforge.store.schemas import (
    Blob,
    CallRecord,
    CallRole,
    Flag,
    Rollout,
    RolloutSelection,
    RolloutStatus,
)
from openforge.store.shared import SharedState

__all__ = ["RolloutConflict", "RolloutNotFound", "Store", "StoreError"]


class Store(Protocol):
    @property
    def shared(self) -> SharedState:
        """The pause and weights every gateway on this store shares (store/shared.py)."""
        ...

    async def create_rollout(
        self,
        task_id: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        run_id: str | None = None,
        split: str | None = None,
    ) -> Rollout:
        """Mint a rollout with a fresh id and a secret key (≥128 bits), recording the run
        that made it and its task's split (None: not known)."""
        ...

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """Raise :class:`RolloutNotFound` when absent."""
        ...

    async def rollout_by_key(self, key: str) -> Rollout | None:
        """The rollout whose own (policy) key this is; None otherwise."""
        ...

    async def mint_role_key(self, rollout_id: str, role: CallRole) -> str:
        """A fresh secret key (≥128 bits) through which calls are recorded under the
        rollout with ``role`` (a judge's or a simulated user's). Raises
        :class:`RolloutNotFound` when absent and :class:`RolloutConflict` when finished."""
        ...

    async def rollout_by_role_key(self, key: str) -> tuple[Rollout, CallRole] | None:
        """The rollout and role a key minted by :meth:`mint_role_key` belongs to."""
        ...

    async def mark_running(self, rollout_id: str) -> None:
        """created → running on its first call; a no-op otherwise."""
        ...

    async def finish_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus,
        reward: float | None = None,
        details: dict[str, Any] | None = None,
    ) -> Rollout:
        """Idempotent; a conflicting repeat raises :class:`RolloutConflict`."""
        ...

    async def flag_rollout(self, rollout_id: str, flags: Sequence[Flag]) -> Rollout:
        """Replace the rollout's reward-hack flags with ``flags`` (empty clears them), in
        any status: a monitor runs once the rollout's calls are all in, after its finish,
        and may be run again with other rules. Raises :class:`RolloutNotFound`."""
        ...

    def prepare_call(self, call: CallRecord) -> RequestColumns:
        """The request-side columns of ``call`` (its id, prompt ids, raw request and
        conversation are read; nothing else needs to be set yet), for :meth:`record_call`:
        a gateway computes them while the engine generates, so less is left to do between
        the last token and the answer. CPU only, nothing is written."""
        ...

    async def record_call(self, call: CallRecord, request: RequestColumns | None = None) -> None:
        """Return once the call is durable (committed to disk). ``request``: what
        :meth:`prepare_call` returned for this call (recomputed when it no longer fits)."""
        ...

    async def calls(self, rollout_id: str, tokens: bool = True) -> list[CallRecord]:
        """The rollout's calls in ``seq`` order; ``tokens=False`` skips the id blobs."""
        ...

    async def call_by_response_id(self, rollout_id: str, response_id: str) -> CallRecord | None:
        """The call of ``rollout_id`` whose answer had this id (a Responses ``resp_…``).

        Scoped to the rollout: the id of another rollout's answer is not found, so one
        rollout can never continue another's conversation.
        """
        ...

    async def next_seq(self, rollout_id: str) -> int:
        """One past the highest recorded ``seq`` of the rollout (0 for none)."""
        ...

    async def allocate_seq(self, rollout_id: str) -> int:
        """A ``seq`` for the rollout's next call, unique among every caller of this store.

        Every gateway sharing the store allocates here, so a rollout served by several
        replicas still numbers its calls 0, 1, 2, … A result above what the caller
        allocated last means another process served calls of the rollout in between.
        Raises :class:`RolloutConflict` when the rollout is finished (a finish made
        through any replica holds for all) and :class:`RolloutNotFound` when absent.
        """
        ...

    async def rollouts(
        self,
        statuses: Sequence[RolloutStatus] | None = None,
        group_id: str | None = None,
        selection: RolloutSelection | None = None,
    ) -> list[Rollout]:
        """Rollouts filtered by status, group and ``selection``, oldest first."""
        ...

    async def put_blobs(self, blobs: Sequence[Blob]) -> None:
        """Store content-addressed blobs; return once durable. Idempotent: a sha256 already
        stored is left as it is (same digest, same bytes)."""
        ...

    async def get_blob(self, sha256: str) -> Blob | None:
        """The blob with this digest; None when none is stored."""
        ...

    async def close(self) -> None: ...
