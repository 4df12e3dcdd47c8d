"""Group commit for the SQLite store: one writer thread, few statements per group.

Callers enqueue writes and await a future; the writer drains everything queued, runs it
in one transaction, commits once, and only then resolves the futures, so a write is
durable when its future resolves (see :mod:`openforge.store.sqlite`).

Every statement the writer runs hands the GIL away while SQLite works and must win it
back from the event loop, which, when busy, keeps it for up to the 5 ms switch interval.
A group therefore costs a handful of statements however many writes it holds: recorded
calls (the hot write, one per model call) arrive as ready-made rows and go in as one
multi-row ``INSERT``, and a group of calls alone as that single statement in its own
transaction (the ``created -> running`` move a rollout's first call implies is a trigger
inside the insert, schema v6). A multi-row insert is all or nothing, so when one fails (a
duplicate seq) its rows go in again one statement each, and only the bad one fails. Other
writes are functions run in a savepoint each, so one bad write never sinks its neighbours.

A row that finds the writer idle (nothing queued, no group running) and is the only call
in flight (``alone``: the store knows of no other call prepared and not yet recorded) is
committed right away on the caller's thread instead (``inline=True``): handing one row to
the thread and its result back costs two thread wake-ups and a GIL hand-over each way,
measured at ~100 µs of a ~300 µs ``record_call`` on one core, and at one call at a time
there is no group to gather. With other calls in flight a row waits for the thread even
when it is idle, since the rows arriving meanwhile share its commit: committing each
inline cost 0.08 ± 0.03 ms more CPU per call at 64 connections (bench/gateway.py
``--only paired --pairs 4``, agent body). The connection's lock keeps the two paths
apart. Only for ``synchronous=NORMAL`` (a commit is a WAL append, no fsync) and a store
no other process writes (SQLite is served by one gateway process), so an inline commit
never waits on a disk or a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from openforge.store.checkpoint import WalCheckpointer
from openforge.store.errors import StoreError

__all__ = ["GroupWriter"]

T = TypeVar("T")
_STOP = object()
_MAX_GROUP = 512  # writes per transaction; bounds a group's latency under a burst
_MAX_ROWS = 128  # rows per INSERT statement (27 columns: well under SQLite's 32766 variables)

Outcome = tuple[Any, BaseException | None]


class _Write:
    __slots__ = ("fn", "future", "loop", "row")

    def __init__(
        self,
        fn: Callable[[sqlite3.Connection], Any] | None,
        row: tuple[Any, ...] | None,
        future: asyncio.Future[Any] | None,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.fn = fn  # a write of any kind, or None for a row
        self.row = row  # a row for the batched table
        self.future = future  # None for a row committed inline: nobody awaits it
        self.loop = loop


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the awaiting task was cancelled; the write still happened
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _in(n: int) -> str:
    return "(" + ",".join("?" * n) + ")"


class GroupWriter:
    """The store's writer thread over ``conn``; rows go to ``INSERT INTO {table}``."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        insert: str,
        width: int,
        checkpointer: WalCheckpointer | None,
        inline: bool = False,
        lock: threading.Lock | None = None,
    ) -> None:
        self.conn = conn
        self.inline = inline
        self.inline_rows = 0  # rows committed on the caller's thread (tests, benches)
        # The connection: the thread's group or an inline row (and the checkpointer's
        # catch-up, which holds every write back: the lock it was given).
        self._conn_lock = lock if lock is not None else threading.Lock()
        self.path = path
        self._insert = insert  # "INSERT INTO t (cols) VALUES "
        self._row_sql = _in(width)
        self._checkpointer = checkpointer
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="store-write", daemon=True)
        self._thread.start()

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the next group; return its result once committed."""
        return await self._submit(fn, None)  # type: ignore[no-any-return]

    async def insert(self, row: tuple[Any, ...], alone: bool = True) -> None:
        """Insert ``row`` in the next group; at once, on this thread, when ``inline`` is
        on, the writer idle and the row's call ``alone`` in flight."""
        if (
            self.inline
            and alone
            and self._queue.empty()
            and self._conn_lock.acquire(blocking=False)
        ):
            try:
                ((_, error),) = self._commit([_Write(None, row, None, None)])
            finally:
                self._conn_lock.release()
            if error is not None:
                raise error
            self.inline_rows += 1
            return
        await self._submit(None, row)

    async def _submit(
        self,
        fn: Callable[[sqlite3.Connection], Any] | None,
        row: tuple[Any, ...] | None,
    ) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Write(fn, row, future, loop))
        return await future

    def close(self) -> None:
        """Commit what is queued and stop the thread (blocking: run it off the loop)."""
        self._queue.put(_STOP)
        self._thread.join()

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            group: list[_Write] = [first]
            stop = False
            while len(group) < _MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                group.append(item)
            self.run_group(group)
            if stop:
                return

    def run_group(self, group: list[_Write]) -> None:
        """Commit ``group`` in one transaction and resolve its futures."""
        with self._conn_lock:
            outcomes = self._commit(group)
        for w, (result, error) in zip(group, outcomes, strict=True):
            assert w.loop is not None and w.future is not None
            # A RuntimeError means the caller's loop is closed: nobody is waiting.
            with contextlib.suppress(RuntimeError):
                w.loop.call_soon_threadsafe(_resolve, w.future, result, error)

    def _commit(self, group: list[_Write]) -> list[Outcome]:
        """Run ``group`` in one transaction (the connection's lock held); each outcome."""
        conn = self.conn
        outcomes: list[Outcome]
        try:
            single = self._single_statement(group)
            if single is not None:
                outcomes = single
            else:
                conn.execute("BEGIN IMMEDIATE")
                outcomes = self._run(group)
                conn.execute("COMMIT")
            if self._checkpointer is not None:
                self._checkpointer.wrote(len(group))
        except Exception as exc:  # the commit itself failed (disk full, I/O error)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            err = StoreError(f"store {self.path}: write failed: {exc}")
            outcomes = [(None, err)] * len(group)
        return outcomes

    def _single_statement(self, group: list[_Write]) -> list[Outcome] | None:
        """Rows alone: one INSERT is the whole transaction (None: not so)."""
        if len(group) > _MAX_ROWS or any(w.row is None for w in group):
            return None
        try:
            self._insert_rows(group)
        except sqlite3.IntegrityError as exc:
            if len(group) == 1:
                return [(None, exc)]
            # The statement changed nothing: each row alone, in one transaction.
            self.conn.execute("BEGIN IMMEDIATE")
            outcomes = self._each(group)
            self.conn.execute("COMMIT")
            return outcomes
        return [(None, None)] * len(group)

    def _run(self, group: list[_Write]) -> list[Outcome]:
        """Every write of ``group`` inside the open transaction, in order."""
        conn = self.conn
        outcomes: list[Outcome] = []
        i = 0
        while i < len(group):
            j = i
            while j < len(group) and group[j].row is not None and j - i < _MAX_ROWS:
                j += 1
            if j > i:
                outcomes += self._rows(group[i:j])
                i = j
                continue
            fn = group[i].fn
            assert fn is not None
            conn.execute("SAVEPOINT w")
            try:
                outcomes.append((fn(conn), None))
                conn.execute("RELEASE w")
            except Exception as exc:
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                outcomes.append((None, exc))
            i += 1
        return outcomes

    def _rows(self, writes: list[_Write]) -> list[Outcome]:
        """Insert rows as one statement; one each when that fails."""
        try:
            self._insert_rows(writes)
        except sqlite3.IntegrityError:
            return self._each(writes)
        return [(None, None)] * len(writes)

    def _each(self, writes: list[_Write]) -> list[Outcome]:
        """Insert rows one statement each (in the open transaction): only bad ones fail."""
        outcomes: list[Outcome] = []
        for w in writes:
            try:
                self._insert_rows([w])
                outcomes.append((None, None))
            except sqlite3.IntegrityError as exc:
                outcomes.append((None, exc))
        return outcomes

    def _insert_rows(self, writes: list[_Write]) -> None:
        params: list[Any] = []
        for w in writes:
            assert w.row is not None
            params += w.row
        sql = self._insert + ",".join([self._row_sql] * len(writes))
        self.conn.execute(sql, params)
