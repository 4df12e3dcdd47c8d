"""The admin state shared by the gateways of one PostgreSQL store (see
:mod:`openforge.store.shared`).

One row of ``control_state`` holds the pause and the weights; every change updates it and
moves its epoch on in one statement, whose ``NOTIFY openforge_control`` is delivered at
commit. Each gateway keeps a row in ``gateway_replicas``: when it was last seen (the
database's clock, so machines' clocks need not agree) and the last epoch it applied.
Both tables are made on first use when missing (no schema version: a store without them
is as good, and an older OpenForge ignores them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import psycopg

from openforge.store.errors import StoreError
from openforge.store.pgschema import with_timeout
from openforge.store.schemas import ControlState
from openforge.store.shared import KEEP, UNCHANGED, Keep, Weights

__all__ = ["PgShared"]

_log = logging.getLogger(__name__)
CHANNEL = "openforge_control"
_LOCK_DDL = 0x0F0F_5C4F  # advisory locks: creating the tables, and one weight update at a time
_LOCK_UPDATE = 0x0F0F_5C50
_NOW = "extract(epoch from clock_timestamp())"
_DDL = f"""
CREATE TABLE IF NOT EXISTS control_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch BIGINT NOT NULL,
    paused BOOLEAN NOT NULL,
    weight_version TEXT,
    weights_path TEXT,
    adapter TEXT,
    changed_at DOUBLE PRECISION NOT NULL
);
ALTER TABLE control_state ADD COLUMN IF NOT EXISTS syncing TEXT;
INSERT INTO control_state (id, epoch, paused, changed_at) VALUES (1, 0, false, {_NOW})
    ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS gateway_replicas (
    id TEXT PRIMARY KEY,
    seen_at DOUBLE PRECISION NOT NULL,
    applied_epoch BIGINT NOT NULL
);
"""
_COLUMNS = "epoch, paused, weight_version, weights_path, adapter, syncing"
_CHANGE = f"""
WITH s AS (
    UPDATE control_state SET
        epoch = epoch + 1,
        paused = COALESCE(%(paused)s::boolean, paused),
        weight_version = CASE WHEN %(set)s THEN %(version)s::text ELSE weight_version END,
        weights_path = CASE WHEN %(set)s THEN %(path)s::text ELSE weights_path END,
        adapter = CASE WHEN %(set)s THEN %(adapter)s::text ELSE adapter END,
        syncing = CASE WHEN %(keep)s THEN syncing ELSE %(syncing)s::text END,
        changed_at = {_NOW}
    WHERE id = 1 RETURNING {_COLUMNS}
)
SELECT {_COLUMNS}, pg_notify('{CHANNEL}', epoch::text) FROM s
"""
# Only while the gateway holding the update has not been seen lately.
_ABANDON = f"""
WITH s AS (
    UPDATE control_state SET epoch = epoch + 1, syncing = NULL, changed_at = {_NOW}
    WHERE id = 1 AND syncing = %(replica)s AND NOT EXISTS (
        SELECT 1 FROM gateway_replicas WHERE id = %(replica)s AND seen_at > {_NOW} - %(stale)s)
    RETURNING {_COLUMNS}
)
SELECT {_COLUMNS}, pg_notify('{CHANNEL}', epoch::text) FROM s
"""
_SEEN = f"""
INSERT INTO gateway_replicas (id, seen_at, applied_epoch) VALUES (%s, {_NOW}, %s)
ON CONFLICT (id) DO UPDATE SET seen_at = EXCLUDED.seen_at,
    applied_epoch = GREATEST(gateway_replicas.applied_epoch, EXCLUDED.applied_epoch)
RETURNING applied_epoch
"""
_GONE_S = 3600.0  # rows of replicas unseen this long are deleted (killed, never came back)

Read = Callable[[str, Sequence[Any] | dict[str, Any]], Awaitable[list[tuple[Any, ...]]]]


def _state(row: tuple[Any, ...]) -> ControlState:
    return ControlState(int(row[0]), bool(row[1]), row[2], row[3], row[4], row[5])


class PgShared:
    """:class:`~openforge.store.shared.SharedState` in the store's database."""

    def __init__(self, url: str, name: str, read: Read, closed: Callable[[], bool]) -> None:
        """``read``: runs one statement on the store's pool (autocommit) and returns its rows."""
        self._url = url
        self._name = name
        self._read_rows = read
        self._closed = closed
        self._ready = False

    async def _own(self, sql: str, args: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run ``sql`` on a connection of its own, committed durably (the store's pool
        commits asynchronously: fine for acknowledgements, not for a change of state)."""
        try:
            async with await psycopg.AsyncConnection.connect(with_timeout(self._url)) as conn:
                if not self._ready:
                    async with conn.transaction():
                        await conn.execute(f"SELECT pg_advisory_xact_lock({_LOCK_DDL})")
                        for statement in _DDL.split(";"):
                            if statement.strip():
                                await conn.execute(statement)
                    self._ready = True
                if not sql:
                    return []
                async with conn.transaction():
                    cur = await conn.execute(sql, args)
                    return await cur.fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"store {self._name}: shared admin state: {exc}") from None

    async def _read(
        self, sql: str, args: Sequence[Any] | dict[str, Any] = ()
    ) -> list[tuple[Any, ...]]:
        if not self._ready:
            await self._own("")
        return await self._read_rows(sql, args)

    async def state(self) -> ControlState:
        """The row as the database has it now."""
        return _state((await self._read(f"SELECT {_COLUMNS} FROM control_state WHERE id = 1"))[0])

    async def change(
        self,
        *,
        paused: bool | None = None,
        weights: Weights | None = UNCHANGED,
        syncing: str | Keep | None = KEEP,
    ) -> ControlState:
        """Update the row and notify every listener, in one statement."""
        args = {
            "keep": isinstance(syncing, Keep),
            "syncing": None if isinstance(syncing, Keep) else syncing,
            "paused": paused,
            "set": weights is not None,
            "version": weights.version if weights is not None else None,
            "path": weights.path if weights is not None else None,
            "adapter": weights.adapter if weights is not None else None,
        }
        return _state((await self._own(_CHANGE, args))[0])

    async def abandon_sync(self, replica: str, stale_s: float) -> ControlState | None:
        """Clear ``syncing`` if ``replica`` holds it and has not been seen lately."""
        rows = await self._own(_ABANDON, {"replica": replica, "stale": stale_s})
        return _state(rows[0]) if rows else None

    async def changes(self) -> AsyncIterator[ControlState]:
        """The state after each notification, from a ``LISTEN`` connection of its own; on
        each (re)connection the current state first (what a lost connection missed)."""
        while not self._closed():
            try:
                conn = await psycopg.AsyncConnection.connect(
                    with_timeout(self._url), autocommit=True
                )
            except psycopg.Error as exc:
                _log.warning("store %s: cannot listen for admin changes: %s", self._name, exc)
                await asyncio.sleep(1.0)
                continue
            try:
                await conn.execute(f"LISTEN {CHANNEL}")
                yield await self.state()
                async for _ in conn.notifies():
                    yield await self.state()
            except (psycopg.Error, StoreError) as exc:
                if not self._closed():
                    _log.warning("store %s: admin changes: %s; listening again", self._name, exc)
                    await asyncio.sleep(1.0)
            finally:
                await conn.close()

    async def seen(self, replica: str, applied_epoch: int) -> None:
        """Record that ``replica`` is alive and has applied up to ``applied_epoch``."""
        await self._read(_SEEN, (replica, applied_epoch))

    async def behind(self, replica: str, epoch: int, stale_s: float) -> list[str]:
        """Live replicas other than ``replica`` that have not applied ``epoch``."""
        rows = await self._read(
            "SELECT id FROM gateway_replicas WHERE id <> %s AND applied_epoch < %s"
            f" AND seen_at > {_NOW} - %s ORDER BY id",
            (replica, epoch, stale_s),
        )
        return [str(r[0]) for r in rows]

    async def live_others(self, replica: str, stale_s: float) -> int:
        """How many other replicas were seen within ``stale_s`` (long-gone rows are dropped)."""
        await self._read(
            f"DELETE FROM gateway_replicas WHERE seen_at < {_NOW} - %s RETURNING id", (_GONE_S,)
        )
        rows = await self._read(
            f"SELECT count(*) FROM gateway_replicas WHERE id <> %s AND seen_at > {_NOW} - %s",
            (replica, stale_s),
        )
        return int(rows[0][0])

    async def leave(self, replica: str) -> None:
        """Delete ``replica``'s row."""
        await self._read("DELETE FROM gateway_replicas WHERE id = %s RETURNING id", (replica,))

    @contextlib.asynccontextmanager
    async def lock(self) -> AsyncIterator[None]:
        """A session advisory lock on a connection of its own (released if this process
        dies, with its connection)."""
        try:
            conn = await psycopg.AsyncConnection.connect(with_timeout(self._url), autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(
                f"store {self._name}: cannot lock for a weight update: {exc}"
            ) from None
        try:
            await conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_UPDATE,))
            yield
        finally:
            await conn.close()
