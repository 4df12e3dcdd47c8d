"""The admin state shared by every gateway on one store (:class:`SharedState`): the pause,
the weight version and each gateway's acknowledgement of the changes it applied.

A weight update through any gateway of a fleet holds every gateway's new calls, waits
until each has drained its calls in flight, loads, stamps the new version everywhere and
resumes; a gateway started later reads the current state before it serves. The state
lives in the store so that it outlasts any one gateway: in PostgreSQL
(:mod:`openforge.store.pgshared`) for several processes, in memory (:class:`LocalShared`)
for the one process a SQLite store has.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from openforge.store.schemas import ControlState

__all__ = ["KEEP", "UNCHANGED", "Keep", "LocalShared", "SharedState", "Weights"]


@dataclasses.dataclass(frozen=True, slots=True)
class Weights:
    """The weights part of a :class:`ControlState` change (all of it is set at once)."""

    version: str | None
    path: str | None = None
    adapter: str | None = None


# ``change(weights=UNCHANGED)``: leave the weights as they are.
UNCHANGED: Weights | None = None


class Keep(enum.Enum):
    """``change(syncing=KEEP)``: leave who is syncing as it is (None clears it)."""

    KEEP = 0


KEEP = Keep.KEEP


class SharedState(Protocol):
    async def state(self) -> ControlState:
        """The current state."""
        ...

    async def change(
        self,
        *,
        paused: bool | None = None,
        weights: Weights | None = UNCHANGED,
        syncing: str | Keep | None = KEEP,
    ) -> ControlState:
        """Set ``paused`` (None: as it is), ``weights`` (None: as they are) and who is
        ``syncing`` in one step that moves the epoch on, tell every gateway, and return
        the new state."""
        ...

    async def abandon_sync(self, replica: str, stale_s: float) -> ControlState | None:
        """Clear ``syncing`` if ``replica`` holds it and was not seen within ``stale_s``
        (it died during an update); the new state, or None when nothing changed."""
        ...

    def changes(self) -> AsyncIterator[ControlState]:
        """The state after each change made anywhere (one's own too; a missed one is
        covered by the next), until the store closes or the caller stops."""
        ...

    async def seen(self, replica: str, applied_epoch: int) -> None:
        """``replica`` is alive and has applied every change up to ``applied_epoch``."""
        ...

    async def behind(self, replica: str, epoch: int, stale_s: float) -> list[str]:
        """The other live replicas (seen within ``stale_s``) that have not applied ``epoch``."""
        ...

    async def live_others(self, replica: str, stale_s: float) -> int:
        """How many other replicas were seen within ``stale_s``."""
        ...

    async def leave(self, replica: str) -> None:
        """``replica`` stops: no longer waited for."""
        ...

    def lock(self) -> AbstractAsyncContextManager[None]:
        """Held by one weight update at a time across every gateway on the store."""
        ...


class LocalShared:
    """The shared state of a store one process uses (SQLite): kept in memory, no others."""

    def __init__(self) -> None:
        self._state = ControlState()
        self._changed = asyncio.Condition()
        self._lock = asyncio.Lock()
        self._closed = False

    async def state(self) -> ControlState:
        """The current state."""
        return self._state

    async def change(
        self,
        *,
        paused: bool | None = None,
        weights: Weights | None = UNCHANGED,
        syncing: str | Keep | None = KEEP,
    ) -> ControlState:
        """Apply the change in memory (see :meth:`SharedState.change`)."""
        new = dataclasses.replace(
            self._state,
            epoch=self._state.epoch + 1,
            paused=self._state.paused if paused is None else paused,
            syncing=self._state.syncing if isinstance(syncing, Keep) else syncing,
        )
        if weights is not None:
            new = dataclasses.replace(
                new,
                weight_version=weights.version,
                weights_path=weights.path,
                adapter=weights.adapter,
            )
        self._state = new
        async with self._changed:
            self._changed.notify_all()
        return new

    async def changes(self) -> AsyncIterator[ControlState]:
        """Each state after a change, until :meth:`close`."""
        while not self._closed:
            async with self._changed:
                await self._changed.wait()
            if not self._closed:
                yield self._state

    async def abandon_sync(self, replica: str, stale_s: float) -> ControlState | None:
        """Nothing to clear: the one process's update ends with it."""
        return None

    async def seen(self, replica: str, applied_epoch: int) -> None:
        """Nothing to record: no other process waits for this one."""

    async def behind(self, replica: str, epoch: int, stale_s: float) -> list[str]:
        """None: there are no other replicas."""
        return []

    async def live_others(self, replica: str, stale_s: float) -> int:
        """None: there are no other replicas."""
        return 0

    async def leave(self, replica: str) -> None:
        """Nothing to record."""

    @contextlib.asynccontextmanager
    async def lock(self) -> AsyncIterator[None]:
        """An in-process lock."""
        async with self._lock:
            yield

    async def close(self) -> None:
        """End :meth:`changes`."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()
