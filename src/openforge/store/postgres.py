"""The PostgreSQL store: one database shared by every gateway replica.

Same records and semantics as the SQLite store (rows laid out by
:mod:`openforge.store.rows`), with what several processes need:

- **Group commit.** Writes queue to one writer task per process, which runs everything
  queued in one transaction (recorded calls as one pipelined ``executemany``, the
  ``created -> running`` updates as one ``UPDATE``, other writes in a savepoint each) and
  resolves the callers' futures only after ``COMMIT`` returned. ``synchronous_commit`` is
  left ``on``: the commit has reached the server's WAL on disk, so a call acknowledged
  to the gateway survives the gateway's SIGKILL and the server's crash.
- **Sequence numbers from the database.** :meth:`PostgresStore.allocate_seq` is one
  ``UPDATE … RETURNING`` of the rollout's counter (the row lock orders concurrent
  replicas). It runs with ``synchronous_commit = off``: the WAL is written in order, so any
  call committed durably afterwards makes its allocation durable too, and an allocation
  lost in a crash had no recorded call. It refuses a finished rollout, which is how a
  finish made through one replica holds for all of them at once, and moves a ``created``
  rollout to ``running`` (its first call), so recording needs no update.
- **No stale state across replicas.** Rollouts are cached by key only for authorisation
  (their status is re-checked by the allocation); ``get_rollout`` and listings read the
  database.

Reads and allocations use a small connection pool (psycopg_pool), writes one dedicated
connection. Async resources are made on first use, on the loop that uses the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from openforge.store.core import (
    CallCodec,
    Finish,
    SqlStore,
    blob_rows,
    sync_finished,
)
from openforge.store.errors import RolloutConflict, RolloutNotFound, StoreError
from openforge.store.pgschema import (
    PG_SCHEMA_VERSION,
    check_schema,
    connect_error,
    redact,
    with_timeout,
)
from openforge.store.pgshared import PgShared
from openforge.store.rows import (
    CALL_COLUMNS,
    CALL_WIDTH,
    ROLE_KEY_COLUMNS,
    ROLLOUT_COLUMNS,
    ROLLOUT_WIDTH,
    RequestColumns,
    flags_json,
    rollout_from_row,
)
from openforge.store.schemas import (
    TERMINAL,
    Blob,
    CallRecord,
    CallRole,
    Flag,
    Rollout,
)

__all__ = ["PG_SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")
_log = logging.getLogger(__name__)
Conn = psycopg.AsyncConnection[Any]
_MAX_GROUP = 512  # writes per transaction; bounds a group's latency under a burst
_TERMINAL_SQL = "(" + ",".join(f"'{s}'" for s in sorted(str(t) for t in TERMINAL)) + ")"

_CALL_INSERT = f"INSERT INTO calls ({CALL_COLUMNS}) VALUES ({', '.join(['%s'] * CALL_WIDTH)})"
_ROLLOUT_MARKS = ", ".join(["%s"] * ROLLOUT_WIDTH)
_MARK_RUNNING = "UPDATE rollouts SET status = 'running' WHERE status = 'created' AND id = ANY(%s)"
_ALLOCATE = f"""
UPDATE rollouts SET next_seq = GREATEST(
    next_seq, COALESCE((SELECT MAX(seq) + 1 FROM calls WHERE rollout_id = %(id)s), 0)) + 1,
    status = CASE WHEN status = 'created' THEN 'running' ELSE status END
WHERE id = %(id)s AND status NOT IN {_TERMINAL_SQL}
RETURNING next_seq - 1
"""


@dataclass(slots=True)
class _Write:
    """A queued write: a row of ``calls`` (and a rollout to mark running) or a function."""

    future: asyncio.Future[Any]
    row: tuple[Any, ...] | None = None
    mark: str | None = None
    fn: Callable[[Conn], Awaitable[Any]] | None = None
    result: Any = None
    error: BaseException | None = field(default=None)


class PostgresStore(SqlStore):
    """A :class:`~openforge.store.base.Store` in a PostgreSQL database (``postgresql://``).

    Opening checks (or creates) the schema synchronously, a one-off at startup.
    """

    _MARK = "%s"
    _ORDER = "created_at, n"

    def __init__(self, url: str, pool_size: int = 4) -> None:
        self.url = url
        self.name = redact(url)
        check_schema(url)
        self._pool_size = pool_size
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._writer_conn: Conn | None = None
        self._queue: asyncio.Queue[_Write | None] | None = None
        self._writer_task: asyncio.Task[None] | None = None
        self._started: asyncio.Lock | None = None
        self._by_key: dict[str, Rollout] = {}
        self._running: set[str] = set()  # rollouts known past "created"
        self._codec = CallCodec()  # bases: each rollout's last call made here
        self._closed = False
        # The pause and weights every gateway on the database shares (store/pgshared.py).
        self.shared = PgShared(url, self.name, self._read, lambda: self._closed)

    # -- plumbing --------------------------------------------------------------

    async def _start(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.name} is closed")
        if self._writer_task is not None:
            return
        if self._started is None:
            self._started = asyncio.Lock()
        async with self._started:
            if self._writer_task is not None:
                return
            try:
                pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                    with_timeout(self.url),
                    min_size=1,
                    max_size=self._pool_size,
                    kwargs={"autocommit": True},
                    configure=_configure_reader,
                    open=False,
                )
                await pool.open(wait=True, timeout=30.0)
                self._writer_conn = await psycopg.AsyncConnection.connect(with_timeout(self.url))
            except (psycopg.Error, TimeoutError) as exc:
                raise connect_error(self.url, exc) from None
            self._pool = pool
            self._queue = asyncio.Queue()
            self._writer_task = asyncio.create_task(self._write_loop(), name="store-write")

    async def _read(self, sql: str, args: Sequence[Any] | dict[str, Any]) -> list[tuple[Any, ...]]:
        await self._start()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql, args)
                return await cur.fetchall()
        except psycopg.Error as exc:
            raise StoreError(f"store {self.name}: read failed: {exc}") from None

    async def _fetch(self, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        return list(await self._read(sql, args))

    async def _submit(self, write: _Write) -> Any:
        await self._start()
        assert self._queue is not None
        self._queue.put_nowait(write)
        return await write.future

    async def _write(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        result: T = await self._submit(_Write(future, fn=fn))
        return result

    async def _write_loop(self) -> None:
        assert self._queue is not None
        while True:
            first = await self._queue.get()
            if first is None:
                return
            group = [first]
            stop = False
            while len(group) < _MAX_GROUP and not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stop = True
                    break
                group.append(item)
            await self._run_group(group)
            if stop:
                return

    async def _run_group(self, group: list[_Write]) -> None:
        """Commit ``group`` in one transaction, then resolve its futures."""
        conn = self._writer_conn
        assert conn is not None
        try:
            if not await self._rows_alone(conn, group):
                async with conn.transaction():
                    await self._apply(conn, group)
        except psycopg.Error as exc:  # the commit itself failed (server gone, disk full)
            err = StoreError(f"store {self.name}: write failed: {exc}")
            for w in group:
                w.error = err
        for w in group:
            if w.future.done():  # the caller was cancelled; the write still happened
                continue
            if w.error is not None:
                w.future.set_exception(w.error)
            else:
                w.future.set_result(w.result)

    async def _rows_alone(self, conn: Conn, group: list[_Write]) -> bool:
        """Rows alone, no update: the batch is the whole transaction, with no savepoint
        (False: not so, or a bad row rolled it back to be sorted out by :meth:`_apply`)."""
        rows = [w.row for w in group if w.row is not None and not w.mark]
        if len(rows) < len(group):
            return False
        try:
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(_CALL_INSERT, rows)
        except psycopg.errors.IntegrityError:
            return False
        return True

    async def _apply(self, conn: Conn, group: list[_Write]) -> None:
        """Every write of ``group`` inside the open transaction, in order."""
        i = 0
        while i < len(group):
            j = i
            while j < len(group) and group[j].row is not None:
                j += 1
            if j > i:
                await self._rows(conn, group[i:j])
                i = j
                continue
            w = group[i]
            assert w.fn is not None
            try:
                async with conn.transaction():  # a savepoint: one bad write sinks nothing else
                    w.result = await w.fn(conn)
            except (psycopg.errors.IntegrityError, StoreError) as exc:
                w.error = exc
            i += 1

    async def _rows(self, conn: Conn, writes: list[_Write]) -> None:
        """Insert rows in one pipelined batch; one savepoint each when that fails."""
        try:
            async with conn.transaction(), conn.cursor() as cur:
                await cur.executemany(_CALL_INSERT, [w.row for w in writes if w.row is not None])
        except psycopg.errors.IntegrityError:
            for w in writes:
                try:
                    async with conn.transaction():
                        await conn.execute(_CALL_INSERT, w.row)
                except psycopg.errors.IntegrityError as exc:
                    w.error = exc
        marks = sorted({w.mark for w in writes if w.mark and w.error is None})
        if marks:
            await conn.execute(_MARK_RUNNING, (marks,))

    # -- rollouts --------------------------------------------------------------

    async def _insert_rollout(self, rollout: Rollout, row: tuple[Any, ...]) -> Rollout:
        async def insert(conn: Conn) -> None:
            await conn.execute(
                f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES ({_ROLLOUT_MARKS})",
                row,
            )

        await self._write(insert)
        self._by_key[rollout.key] = rollout
        return rollout

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """The rollout as the database has it now; raises :class:`RolloutNotFound`."""
        rows = await self._read(
            f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = %s", (rollout_id,)
        )
        if not rows:
            raise RolloutNotFound(rollout_id)
        return rollout_from_row(rows[0])

    async def rollout_by_key(self, key: str) -> Rollout | None:
        """The rollout a key belongs to; cached after the first lookup (keys never change).

        The cached status may lag a finish made through another replica; the gateway's
        :meth:`allocate_seq` re-checks it in the database before serving a call.
        """
        cached = self._by_key.get(key)
        if cached is not None:
            return cached
        rows = await self._read(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE key = %s", (key,))
        if not rows:
            return None
        rollout = rollout_from_row(rows[0])
        self._by_key[key] = rollout
        return rollout

    async def _insert_role_key(self, row: tuple[Any, ...]) -> None:
        async def insert(conn: Conn) -> None:
            await conn.execute(
                f"INSERT INTO role_keys ({ROLE_KEY_COLUMNS}) VALUES (%s, %s, %s, %s)", row
            )

        await self._write(insert)

    async def rollout_by_role_key(self, key: str) -> tuple[Rollout, CallRole] | None:
        """The rollout (as the database has it now) and role of a minted role key."""
        rows = await self._read(
            f"SELECT {', '.join('r.' + c.strip() for c in ROLLOUT_COLUMNS.split(','))}, k.role"
            " FROM role_keys k JOIN rollouts r ON r.id = k.rollout_id WHERE k.key = %s",
            (key,),
        )
        if not rows:
            return None
        return rollout_from_row(rows[0][:-1]), CallRole(rows[0][-1])

    async def mark_running(self, rollout_id: str) -> None:
        """created → running; a no-op for any other state."""

        async def update(conn: Conn) -> None:
            await conn.execute(_MARK_RUNNING, ([rollout_id],))

        await self._write(update)

    async def _finish(self, rollout_id: str, decide: Callable[[Rollout], Finish]) -> Rollout:
        # The row is locked while deciding, so replicas finishing at once agree.
        async def finish(conn: Conn) -> Rollout:
            cur = await conn.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = %s FOR UPDATE", (rollout_id,)
            )
            row = await cur.fetchone()
            if row is None:
                raise RolloutNotFound(rollout_id)
            decided = decide(rollout_from_row(row))
            if (update := decided.update("%s")) is not None:
                await conn.execute(*update)
            return decided.rollout

        result = await self._write(finish)
        self._codec.drop(rollout_id)
        synced = sync_finished(self._by_key.get(result.key), result)
        return synced if synced is not None else result

    async def flag_rollout(self, rollout_id: str, flags: Sequence[Flag]) -> Rollout:
        """Replace the rollout's reward-hack flags; committed on return."""
        column = flags_json(flags)

        async def update(conn: Conn) -> Rollout:
            cur = await conn.execute(
                f"UPDATE rollouts SET flags = %s WHERE id = %s RETURNING {ROLLOUT_COLUMNS}",
                (column, rollout_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise RolloutNotFound(rollout_id)
            return rollout_from_row(row)

        result = await self._write(update)
        cached = self._by_key.get(result.key)
        if cached is not None:  # keep the object others hold in step
            cached.flags = result.flags
        return result

    # -- calls -----------------------------------------------------------------

    def prepare_call(self, call: CallRecord) -> RequestColumns:
        """The request-side columns of ``call``, against its rollout's current base."""
        return self._codec.prepare(call)

    async def record_call(self, call: CallRecord, request: RequestColumns | None = None) -> None:
        """Return once the call is committed. Marks a ``created`` rollout running."""
        if self._closed:
            raise StoreError(f"store {self.name} is closed")
        row, stored = self._codec.encode(call, request)
        # Statuses only move forward: a rollout this store allocated for or marked needs
        # no update (one statement less per group).
        mark = None if call.rollout_id in self._running else call.rollout_id
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._submit(_Write(future, row=row, mark=mark))
        # Committed: a base the next call may name. Another replica's calls of the rollout
        # are not seen here; their rows name their own replica's bases.
        self._codec.committed(call, stored)
        self._note_running(call.rollout_id)

    async def put_blobs(self, blobs: Sequence[Blob]) -> None:
        """Store blobs not stored yet (``ON CONFLICT DO NOTHING`` on the digest); durable
        on return."""
        if not blobs:
            return
        rows = blob_rows(blobs)

        async def insert(conn: Conn) -> None:
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO blobs (sha256, media_type, size, data, created_at)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (sha256) DO NOTHING",
                    rows,
                )

        await self._write(insert)

    async def allocate_seq(self, rollout_id: str) -> int:
        """The rollout's next ``seq``, from its counter row: distinct across replicas."""
        rows = await self._read(_ALLOCATE, {"id": rollout_id})
        if rows:
            self._note_running(rollout_id)
            return int(rows[0][0])
        rollout = await self.get_rollout(rollout_id)  # raises RolloutNotFound
        raise RolloutConflict(f"rollout {rollout_id} is finished ({rollout.status})")

    def _note_running(self, rollout_id: str) -> None:
        if len(self._running) > 100_000:  # a bound, not an eviction policy: re-marking is free
            self._running.clear()
        self._running.add(rollout_id)

    async def close(self) -> None:
        """Commit what is queued, then close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._writer_task is not None and self._queue is not None:
            self._queue.put_nowait(None)
            await self._writer_task
        if self._writer_conn is not None:
            await self._writer_conn.close()
        if self._pool is not None:
            await self._pool.close()


async def _configure_reader(conn: Conn) -> None:
    # Reader connections write only sequence allocations, which need no flush of their
    # own (see the module docstring).
    await conn.execute("SET synchronous_commit = off")
