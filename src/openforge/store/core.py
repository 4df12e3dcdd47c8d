"""What the SQLite and PostgreSQL stores share: everything but SQL text and connections.

A store turns calls into rows and back the same way whichever database holds them
(:class:`CallCodec`), and decides a rollout's finish by the same rules
(:func:`decide_finish`); each backend keeps only how it reaches its database, the SQL
dialect it speaks and what it may cache (SQLite caches rollouts, as its file has one
writer; PostgreSQL does not, as replicas share the database).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import orjson
import zstandard

from openforge.store.delta import Bases, StoredBase
from openforge.store.errors import RolloutConflict
from openforge.store.rows import (
    BASE_HOPS,
    CALL_COLUMNS,
    ROLLOUT_COLUMNS,
    RequestColumns,
    call_row,
    calls_from_rows,
    foreign_bases,
    mint_rollout,
    request_columns,
    role_key_row,
    rollout_from_row,
)
from openforge.store.schemas import (
    TERMINAL,
    TRANSITIONS,
    Blob,
    CallRecord,
    CallRole,
    Rollout,
    RolloutSelection,
    RolloutStatus,
)

__all__ = [
    "CallCodec",
    "Finish",
    "SqlStore",
    "blob_rows",
    "call_columns",
    "check_open",
    "decide_finish",
    "rollouts_query",
    "sync_finished",
    "terminal",
]


class CallCodec:
    """Calls to rows and back: one compressor (used by one thread at a time), each
    rollout's last committed call (the base its next call is stored against:
    :mod:`openforge.store.delta`) and the decompressor."""

    def __init__(self) -> None:
        self._compressor = zstandard.ZstdCompressor(level=3)
        self._compress_lock = threading.Lock()
        self._bases = Bases()
        self._decompressor = zstandard.ZstdDecompressor()

    def prepare(self, call: CallRecord) -> RequestColumns:
        """The request-side columns of ``call``, against its rollout's current base."""
        role = str(call.role)
        base, roots = self._bases.get(call.rollout_id, role), self._bases.roots(role)
        with self._compress_lock:
            return request_columns(call, self._compressor, base, roots)

    def encode(
        self, call: CallRecord, request: RequestColumns | None
    ) -> tuple[tuple[Any, ...], StoredBase]:
        """The call's row and the call as its successor's base (``request``: what
        :meth:`prepare` returned for it, reused when it still fits)."""
        role = str(call.role)
        base, roots = self._bases.get(call.rollout_id, role), self._bases.roots(role)
        with self._compress_lock:
            return call_row(call, self._compressor, base, request, roots)

    def committed(self, call: CallRecord, stored: StoredBase) -> None:
        """``call`` is committed: a base its rollout's next call (and others) may name."""
        self._bases.put(call.rollout_id, str(call.role), stored)

    def drop(self, rollout_id: str) -> None:
        """The rollout is finished: forget its bases."""
        self._bases.drop(rollout_id)

    def decode(
        self, rows: Sequence[Sequence[Any]], tokens: bool, bases: Sequence[Sequence[Any]] = ()
    ) -> list[CallRecord]:
        """The calls of ``rows`` (see :func:`~openforge.store.rows.calls_from_rows`)."""
        return calls_from_rows(rows, tokens, self._decompressor, bases)


def call_columns(tokens: bool) -> str:
    """The ``calls`` columns to select; ``tokens=False`` reads NULL for the id blobs."""
    if tokens:
        return CALL_COLUMNS
    return CALL_COLUMNS.replace("prompt_ids, output_ids, output_logprobs", "NULL, NULL, NULL")


def _any_of(column: str, values: Sequence[str | None], mark: str) -> tuple[str, list[Any]]:
    """``column`` is one of ``values`` (None among them: or NULL)."""
    known = [v for v in values if v is not None]
    parts = [f"{column} IN ({','.join([mark] * len(known))})"] if known else []
    if len(known) < len(values):
        parts.append(f"{column} IS NULL")
    return "(" + " OR ".join(parts) + ")", known


def rollouts_query(
    statuses: Sequence[RolloutStatus] | None,
    group_id: str | None,
    mark: str,
    order: str,
    selection: RolloutSelection | None = None,
) -> tuple[str, list[Any]]:
    """The listing of rollouts by status, group and ``selection`` (runs, splits, tasks),
    ordered by ``order``, with ``mark`` (``?`` or ``%s``) as the placeholder."""
    where: list[str] = []
    args: list[Any] = []
    if statuses:
        where.append(f"status IN ({','.join([mark] * len(statuses))})")
        args.extend(str(s) for s in statuses)
    if group_id is not None:
        where.append(f"group_id = {mark}")
        args.append(group_id)
    if selection is not None:
        for column, values in (
            ("run_id", selection.runs),
            ("split", selection.splits),
            ("task_id", selection.tasks),
        ):
            if values:
                clause, known = _any_of(column, values, mark)
                where.append(clause)
                args.extend(known)
    sql = f"SELECT {ROLLOUT_COLUMNS} FROM rollouts"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + f" ORDER BY {order}", args


def blob_rows(blobs: Sequence[Blob]) -> list[tuple[str, str, int, bytes, float]]:
    """The ``blobs`` rows (sha256, media type, size, data, created at) of ``blobs``."""
    now = time.time()
    return [(b.sha256, b.media_type, len(b.data), b.data, now) for b in blobs]


def check_open(rollout: Rollout) -> None:
    """Raise :class:`RolloutConflict` when ``rollout`` is finished."""
    if rollout.status in TERMINAL:
        raise RolloutConflict(f"rollout {rollout.id} is finished ({rollout.status})")


def terminal(status: RolloutStatus | str) -> RolloutStatus:
    """``status`` as a terminal status; :class:`RolloutConflict` when it is not one."""
    status = RolloutStatus(status)
    if status not in TERMINAL:
        raise RolloutConflict(f"{status} is not a terminal status")
    return status


_FINISHED_COLUMNS = ("status", "reward", "finished_at", "details")


@dataclass(frozen=True, slots=True)
class Finish:
    """A finish decided on the rollout's current row: the rollout as it is afterwards and
    what of the row changes (``none``: a repeat; ``reward``: a repeat adding the reward;
    ``full``: the move to a terminal status)."""

    rollout: Rollout
    change: Literal["none", "reward", "full"]

    def update(self, mark: str) -> tuple[str, tuple[Any, ...]] | None:
        """The ``UPDATE`` that writes it (``mark``: the placeholder), or None."""
        r = self.rollout
        if self.change == "reward":
            return f"UPDATE rollouts SET reward = {mark} WHERE id = {mark}", (r.reward, r.id)
        if self.change == "full":
            sets = ", ".join(
                f"{c} = {mark}" for c in ("status", "reward", "finished_at", "details")
            )
            args = (str(r.status), r.reward, r.finished_at, orjson.dumps(r.details), r.id)
            return f"UPDATE rollouts SET {sets} WHERE id = {mark}", args
        return None


def decide_finish(
    current: Rollout,
    status: RolloutStatus,
    reward: float | None,
    details: dict[str, Any] | None,
    now: float,
) -> Finish:
    """Finish ``current`` (the row as read, locked where the database has locks) as
    ``status``. The same finish again changes nothing; a repeat may add a reward to a
    finish that had none (scoring happens after the harness ends); a repeat with another
    status or another reward, or a move the state table does not allow, raises
    :class:`RolloutConflict`."""
    if current.status in TERMINAL:
        if current.status != status or (
            reward is not None and current.reward is not None and reward != current.reward
        ):
            raise RolloutConflict(
                f"rollout {current.id} already finished as {current.status}"
                f" (reward {current.reward}); cannot finish as {status} (reward {reward})"
            )
        if reward is not None and current.reward is None:
            current.reward = reward
            return Finish(current, "reward")
        return Finish(current, "none")
    if status not in TRANSITIONS[current.status]:
        raise RolloutConflict(f"rollout {current.id}: {current.status} → {status}")
    current.status = status
    current.reward = reward
    current.finished_at = now
    current.details = dict(details or {})
    return Finish(current, "full")


def sync_finished(cached: Rollout | None, result: Rollout) -> Rollout | None:
    """Bring ``cached`` (an object others hold) in step with the finished ``result``;
    None when nothing was cached."""
    if cached is None:
        return None
    cached.status, cached.reward = result.status, result.reward
    cached.finished_at, cached.details = result.finished_at, result.details
    return cached


class SqlStore:
    """What both SQL stores do alike, over each one's reads (:meth:`_fetch`) and writes:
    a backend names its SQL placeholder and listing order, and keeps how it reaches its
    database and what it caches."""

    _MARK: ClassVar[str]  # the SQL placeholder: "?" or "%s"
    _ORDER: ClassVar[str]  # the order rollouts are listed in (creation order)
    _codec: CallCodec

    async def _fetch(self, sql: str, args: Sequence[Any]) -> list[Sequence[Any]]:
        """The rows a query returns."""
        raise NotImplementedError

    async def _insert_rollout(self, rollout: Rollout, row: tuple[Any, ...]) -> Rollout:
        """Write a minted rollout's row; the rollout others should hold, once durable."""
        raise NotImplementedError

    async def _insert_role_key(self, row: tuple[Any, ...]) -> None:
        """Write a ``role_keys`` row; return once durable."""
        raise NotImplementedError

    async def _finish(self, rollout_id: str, decide: Callable[[Rollout], Finish]) -> Rollout:
        """Read the rollout's row (locked where the database has locks), write what
        ``decide`` makes of it, and return the finished rollout."""
        raise NotImplementedError

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """The rollout; raises :class:`~openforge.store.errors.RolloutNotFound`."""
        raise NotImplementedError

    async def create_rollout(
        self,
        task_id: str | None = None,
        group_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        run_id: str | None = None,
        split: str | None = None,
    ) -> Rollout:
        """Mint a rollout with a fresh id and a 192-bit key; durable on return."""
        return await self._insert_rollout(*mint_rollout(task_id, group_id, metadata, run_id, split))

    async def mint_role_key(self, rollout_id: str, role: CallRole) -> str:
        """A fresh key through which calls are recorded under the rollout as ``role``."""
        check_open(await self.get_rollout(rollout_id))
        key, row = role_key_row(rollout_id, role)
        await self._insert_role_key(row)
        return key

    async def finish_rollout(
        self,
        rollout_id: str,
        status: RolloutStatus,
        reward: float | None = None,
        details: dict[str, Any] | None = None,
    ) -> Rollout:
        """Move to a terminal status. The same finish again is a no-op; another conflicts.

        A repeat conflicts when its status differs, or it gives a reward that differs
        from a recorded one; a repeat may add a reward to a finish that had none
        (scoring happens after the harness ends).
        """
        status, now = terminal(status), time.time()
        return await self._finish(
            rollout_id, lambda current: decide_finish(current, status, reward, details, now)
        )

    async def rollouts(
        self,
        statuses: Sequence[RolloutStatus] | None = None,
        group_id: str | None = None,
        selection: RolloutSelection | None = None,
    ) -> list[Rollout]:
        """Rollouts filtered by status, group and ``selection``, oldest first."""
        sql, args = rollouts_query(statuses, group_id, self._MARK, self._ORDER, selection)
        return [rollout_from_row(r) for r in await self._fetch(sql, args)]

    async def calls(self, rollout_id: str, tokens: bool = True) -> list[CallRecord]:
        """The rollout's calls in ``seq`` order; ``tokens=False`` skips the id blobs."""
        columns = call_columns(tokens)
        rows = await self._fetch(
            f"SELECT {columns} FROM calls WHERE rollout_id = {self._MARK} ORDER BY seq",
            (rollout_id,),
        )
        bases: list[Sequence[Any]] = []
        for _ in range(BASE_HOPS):  # roots are whole: one hop, unless rows were edited
            missing = foreign_bases([*rows, *bases])
            if not missing:
                break
            marks = ",".join([self._MARK] * len(missing))
            bases += await self._fetch(
                f"SELECT {columns} FROM calls WHERE id IN ({marks})", missing
            )
        return self._codec.decode(rows, tokens, bases)

    async def call_by_response_id(self, rollout_id: str, response_id: str) -> CallRecord | None:
        """The call of ``rollout_id`` whose answer had this id, if recorded (never another's)."""
        rows = await self._fetch(
            f"SELECT seq FROM calls WHERE response_id = {self._MARK} AND rollout_id = {self._MARK}"
            " LIMIT 1",
            (response_id, rollout_id),
        )
        if not rows:
            return None
        # With the rollout's calls: a call stored as a delta needs its bases.
        calls = await self.calls(rollout_id)
        return next((c for c in calls if c.response_id == response_id), None)

    async def next_seq(self, rollout_id: str) -> int:
        """One past the highest recorded ``seq`` of the rollout (0 for none)."""
        rows = await self._fetch(
            f"SELECT MAX(seq) FROM calls WHERE rollout_id = {self._MARK}", (rollout_id,)
        )
        return 0 if not rows or rows[0][0] is None else int(rows[0][0]) + 1

    async def get_blob(self, sha256: str) -> Blob | None:
        """The blob with this digest, or None."""
        rows = await self._fetch(
            f"SELECT media_type, data FROM blobs WHERE sha256 = {self._MARK}", (sha256,)
        )
        return Blob(sha256, rows[0][0], bytes(rows[0][1])) if rows else None
