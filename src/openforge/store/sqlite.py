"""The SQLite store: WAL mode, one writer thread with group commit, cached key lookups.

Why a writer thread: a synchronous ``COMMIT`` per call is most of a naive gateway's
time (see DESIGN.md, "Hot paths"). Callers enqueue writes and await a future; the
writer drains everything queued, runs it in one transaction (in few statements; one bad
write does not sink its neighbours: store/writer.py), commits once, and only then
resolves the futures. ``record_call`` therefore returns only when the call is committed:
the WAL frame is written to the file, so a process killed with SIGKILL afterwards loses
nothing. ``synchronous=NORMAL`` (the WAL default) survives process death; pass
``synchronous="FULL"`` to survive power loss too, at an fsync per group.

Reads run on a separate single reader thread with its own connection, so a large
export never stalls the writer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from openforge.store.checkpoint import WalCheckpointer
from openforge.store.core import (
    CallCodec,
    Finish,
    SqlStore,
    blob_rows,
    check_open,
    sync_finished,
)
from openforge.store.errors import RolloutNotFound, StoreError
from openforge.store.migrations import (
    BLOBS_DDL,
    MARK_RUNNING_DDL,
    ROLE_KEYS_DDL,
    SCHEMA_VERSION,
    SchemaMismatch,
    migrate,
    read_version,
)
from openforge.store.rows import (
    CALL_COLUMNS,
    CALL_WIDTH,
    ROLE_KEY_COLUMNS,
    ROLLOUT_COLUMNS,
    ROLLOUT_WIDTH,
    RequestColumns,
    flags_json,
    rollout_from_row,
    tables_ddl,
)
from openforge.store.schemas import (
    Blob,
    CallRecord,
    CallRole,
    Flag,
    Rollout,
    RolloutStatus,
)
from openforge.store.shared import LocalShared
from openforge.store.writer import GroupWriter

__all__ = ["SCHEMA_VERSION", "SchemaMismatch", "SqliteStore"]

T = TypeVar("T")
_log = logging.getLogger(__name__)

_SCHEMA = (
    # JSON columns are TEXT, as the first schema had them.
    tables_ddl(real="REAL", blob="BLOB", json="TEXT") + BLOBS_DDL + ROLE_KEYS_DDL + MARK_RUNNING_DDL
)

_CALL_INSERT = f"INSERT INTO calls ({CALL_COLUMNS}) VALUES "
_ROLLOUT_MARKS = ",".join("?" * ROLLOUT_WIDTH)
_WAL_LIMIT = 64 << 20  # bytes a restarted WAL is cut back to


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create a fresh schema, accept the current one, migrate older ones, refuse the rest."""
    version = read_version(conn, path)
    if version is None:
        conn.executescript(
            "BEGIN;" + _SCHEMA + f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION}); COMMIT;"
        )
        return
    if version != SCHEMA_VERSION:
        backup = migrate(conn, path, version)
        if backup is not None:
            _log.warning(
                "store %s migrated from schema %d to %d (backup: %s)",
                path,
                version,
                SCHEMA_VERSION,
                backup,
            )


class SqliteStore(SqlStore):
    """The default :class:`~openforge.store.base.Store`: one SQLite file in WAL mode.

    Opening is synchronous (a one-off at startup). ``call_counts`` of a rollout, token
    counts without the blobs, are available through :meth:`call_summaries`.
    """

    _MARK = "?"
    _ORDER = "created_at, rowid"

    def __init__(self, path: str | Path, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._writer_conn = _connect(self.path, synchronous.upper())
        try:
            _check_schema(self._writer_conn, self.path)
        except BaseException:
            self._writer_conn.close()
            raise
        self._reader_conn = _connect(self.path, synchronous.upper())
        # Checkpoints (the WAL's only fsync under NORMAL) move off the commit path.
        self._checkpointer: WalCheckpointer | None = None
        writes = threading.Lock()  # the writer connection's, lent to the checkpointer
        if self.path != ":memory:":
            self._writer_conn.execute("PRAGMA wal_autocheckpoint=0")
            # A WAL that did grow (a long read held it) goes back to this size on restart.
            self._writer_conn.execute(f"PRAGMA journal_size_limit={_WAL_LIMIT}")
            self._checkpointer = WalCheckpointer(self.path, writes)
        self._by_key: dict[str, Rollout] = {}
        self._by_id: dict[str, Rollout] = {}
        self._role_keys: dict[str, tuple[str, CallRole]] = {}  # key → (rollout id, role)
        self._next_seq: dict[str, int] = {}  # allocate_seq's counters, per live rollout
        # Rows are built by the caller, so the writer thread runs little more than SQLite
        # (see store/writer.py).
        self._codec = CallCodec()
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-read")
        self._closed = False
        # One process: the pause and weights it shares with no one are kept in memory.
        self.shared = LocalShared()
        # A call's row commits on the event loop when the writer is idle and no other call
        # is in flight (store/writer.py): a WAL append under NORMAL; under FULL each commit
        # fsyncs, so that stays queued. Calls in flight are those prepared and not yet
        # recorded; a call dropped unrecorded (its task cancelled) leaves the set with it.
        self._unrecorded: weakref.WeakSet[RequestColumns] = weakref.WeakSet()
        self._writer = GroupWriter(
            self._writer_conn,
            self.path,
            _CALL_INSERT,
            CALL_WIDTH,
            self._checkpointer,
            inline=synchronous.upper() == "NORMAL",
            lock=writes,
        )

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        return await self._writer.write(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, fn, self._reader_conn)

    async def _fetch(self, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        return await self._read(lambda conn: conn.execute(sql, args).fetchall())

    def _cache(self, rollout: Rollout) -> Rollout:
        self._by_id[rollout.id] = rollout
        self._by_key[rollout.key] = rollout
        return rollout

    # -- rollouts --------------------------------------------------------------

    async def _insert_rollout(self, rollout: Rollout, row: tuple[Any, ...]) -> Rollout:
        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES ({_ROLLOUT_MARKS})", row)

        await self._write(insert)
        # Made here, by the file's one writer: it has no calls, and its first allocate_seq
        # needs no MAX() read (a thread hop on every fresh rollout's first call).
        self._next_seq[rollout.id] = 0
        return self._cache(rollout)

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """The rollout; raises :class:`RolloutNotFound` when absent."""
        found = self._by_id.get(rollout_id) or await self._select_rollout("id", rollout_id)
        if found is None:
            raise RolloutNotFound(rollout_id)
        return found

    async def rollout_by_key(self, key: str) -> Rollout | None:
        """The rollout a key belongs to; cached after the first lookup."""
        return self._by_key.get(key) or await self._select_rollout("key", key)

    async def _select_rollout(self, column: str, value: str) -> Rollout | None:
        """The rollout whose ``column`` (id or key) is ``value``, read and cached."""

        def select(conn: sqlite3.Connection) -> Rollout | None:
            row = conn.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE {column} = ?", (value,)
            ).fetchone()
            return rollout_from_row(row) if row else None

        found = await self._read(select)
        return self._cache(found) if found is not None else None

    async def _insert_role_key(self, row: tuple[Any, ...]) -> None:
        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(f"INSERT INTO role_keys ({ROLE_KEY_COLUMNS}) VALUES (?,?,?,?)", row)

        await self._write(insert)
        self._role_keys[row[0]] = (row[1], CallRole(row[2]))

    async def rollout_by_role_key(self, key: str) -> tuple[Rollout, CallRole] | None:
        """The rollout and role of a key minted by :meth:`mint_role_key`."""
        found = self._role_keys.get(key)
        if found is None:

            def select(conn: sqlite3.Connection) -> tuple[str, CallRole] | None:
                row = conn.execute(
                    "SELECT rollout_id, role FROM role_keys WHERE key = ?", (key,)
                ).fetchone()
                return (row[0], CallRole(row[1])) if row else None

            found = await self._read(select)
            if found is None:
                return None
            self._role_keys[key] = found
        return await self.get_rollout(found[0]), found[1]

    async def mark_running(self, rollout_id: str) -> None:
        """created → running; a no-op for any other state."""
        rollout = await self.get_rollout(rollout_id)
        if rollout.status is not RolloutStatus.CREATED:
            return

        def update(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE rollouts SET status = 'running' WHERE id = ? AND status = 'created'",
                (rollout_id,),
            )

        await self._write(update)
        if rollout.status is RolloutStatus.CREATED:
            rollout.status = RolloutStatus.RUNNING

    async def _finish(self, rollout_id: str, decide: Callable[[Rollout], Finish]) -> Rollout:
        def finish(conn: sqlite3.Connection) -> Rollout:
            row = conn.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?", (rollout_id,)
            ).fetchone()
            if row is None:
                raise RolloutNotFound(rollout_id)
            decided = decide(rollout_from_row(row))
            if (update := decided.update("?")) is not None:
                conn.execute(*update)
            return decided.rollout

        result = await self._write(finish)
        self._next_seq.pop(rollout_id, None)
        self._codec.drop(rollout_id)
        synced = sync_finished(self._by_id.get(rollout_id), result)
        return synced if synced is not None else self._cache(result)

    async def flag_rollout(self, rollout_id: str, flags: Sequence[Flag]) -> Rollout:
        """Replace the rollout's reward-hack flags; durable on return."""
        column = flags_json(flags)

        def update(conn: sqlite3.Connection) -> Rollout:
            cur = conn.execute("UPDATE rollouts SET flags = ? WHERE id = ?", (column, rollout_id))
            if cur.rowcount == 0:
                raise RolloutNotFound(rollout_id)
            row = conn.execute(
                f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id = ?", (rollout_id,)
            ).fetchone()
            return rollout_from_row(row)

        result = await self._write(update)
        cached = self._by_id.get(rollout_id)
        if cached is not None:  # keep the object others hold in step
            cached.flags = result.flags
            return cached
        return self._cache(result)

    # -- calls -----------------------------------------------------------------

    def prepare_call(self, call: CallRecord) -> RequestColumns:
        """The request-side columns of ``call``, against its rollout's current base."""
        columns = self._codec.prepare(call)
        self._unrecorded.add(columns)
        return columns

    async def record_call(self, call: CallRecord, request: RequestColumns | None = None) -> None:
        """Return once the call is committed. Marks a ``created`` rollout running."""
        if self._closed:
            raise StoreError(f"store {self.path} is closed")
        row, stored = self._codec.encode(call, request)
        if request is not None:
            self._unrecorded.discard(request)
        # The insert moves a created rollout to running itself (a trigger, schema v6).
        await self._writer.insert(row, alone=not self._unrecorded)
        cached = self._by_id.get(call.rollout_id)
        self._codec.committed(call, stored)
        counted = self._next_seq.get(call.rollout_id)
        if counted is not None and call.seq >= counted:  # recorded without allocate_seq
            self._next_seq[call.rollout_id] = call.seq + 1
        if cached is not None and cached.status is RolloutStatus.CREATED:
            cached.status = RolloutStatus.RUNNING

    async def call_summaries(self, rollout_id: str) -> list[dict[str, Any]]:
        """Per call, without blobs: id, seq, dialect, status, token counts, finish, fork."""

        def select(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT id, seq, dialect, status, prompt_tokens, output_tokens, finish_reason,"
                " fork, request_model, weight_version, error FROM calls WHERE rollout_id = ?"
                " ORDER BY seq",
                (rollout_id,),
            )
            keys = (
                "id",
                "seq",
                "dialect",
                "status",
                "prompt_tokens",
                "output_tokens",
                "finish_reason",
                "fork",
                "request_model",
                "weight_version",
                "error",
            )
            out = [dict(zip(keys, r, strict=True)) for r in rows]
            for d in out:
                d["fork"] = bool(d["fork"])
            return out

        return await self._read(select)

    async def allocate_seq(self, rollout_id: str) -> int:
        """The rollout's next ``seq``, counted in memory after one ``MAX()`` read.

        A SQLite store has one writing process (the file's single gateway), so a counter
        here is as good as one in the file and costs no write per call.
        """
        check_open(await self.get_rollout(rollout_id))
        seq = self._next_seq.get(rollout_id)
        if seq is None:
            seq = await self.next_seq(rollout_id)
            # Two first allocations may both read the same MAX(); the later one moves on.
            seq = max(seq, self._next_seq.get(rollout_id, 0))
        self._next_seq[rollout_id] = seq + 1
        return seq

    # -- blobs -----------------------------------------------------------------

    async def put_blobs(self, blobs: Sequence[Blob]) -> None:
        """Store blobs not stored yet (``INSERT OR IGNORE`` on the digest); durable on return."""
        if not blobs:
            return
        rows = blob_rows(blobs)

        def insert(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT OR IGNORE INTO blobs (sha256, media_type, size, data, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                rows,
            )

        await self._write(insert)

    async def blob_bytes(self) -> int:
        """Total bytes of stored blobs (for reports and benchmarks)."""

        def select(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT COALESCE(SUM(size), 0) FROM blobs").fetchone()
            return int(row[0])

        return await self._read(select)

    async def close(self) -> None:
        """Commit what is queued, stop the threads, close the connections."""
        if self._closed:
            return
        self._closed = True
        await self.shared.close()
        await asyncio.to_thread(self._writer.close)
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.close)
        self._reader.shutdown(wait=True)
        self._writer_conn.close()
        self._reader_conn.close()
