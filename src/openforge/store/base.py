"""The store interface: durable rollouts and calls. SQLite is the default backend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from openforge.store.schemas import CallRecord, Rollout, RolloutStatus

__all__ = ["RolloutConflict", "RolloutNotFound", "Store", "StoreError"]


class StoreError(Exception):
    """Base of the store's errors."""


class RolloutNotFound(StoreError):
    pass


class RolloutConflict(StoreError):
    """A transition the rollout's state does not allow (finish twice, differently)."""


class Store(Protocol):
    async def create_rollout(
        self,
        task_id: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Rollout:
        """Mint a rollout with a fresh id and a secret key (≥128 bits)."""
        ...

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """Raise :class:`RolloutNotFound` when absent."""
        ...

    async def rollout_by_key(self, key: str) -> Rollout | None: ...

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

    async def record_call(self, call: CallRecord) -> None:
        """Return once the call is durable (committed to disk)."""
        ...

    async def calls(self, rollout_id: str, tokens: bool = True) -> list[CallRecord]:
        """The rollout's calls in ``seq`` order; ``tokens=False`` skips the id blobs."""
        ...

    async def rollouts(
        self,
        statuses: Sequence[RolloutStatus] | None = None,
        group_id: str | None = None,
    ) -> list[Rollout]: ...

    async def close(self) -> None: ...
