"""The group writer: how many statements a group costs, and bad rows sorted out."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import zstandard

from openforge.store import CallRecord, CallStatus, RolloutStatus, SqliteStore
from openforge.store.rows import CALL_WIDTH, call_row
from openforge.store.sqlite import _CALL_INSERT
from openforge.store.writer import GroupWriter, _Write


def _call(rollout_id: str, seq: int, id: str | None = None) -> CallRecord:
    return CallRecord(
        id=id or f"c_{rollout_id}_{seq}",
        rollout_id=rollout_id,
        seq=seq,
        dialect="openai_chat",
        status=CallStatus.OK,
        prompt_ids=[1, 2, 3],
        output_ids=[5, seq],
        output_logprobs=[-0.5, 0.0],
        request_model="m",
        raw_request=b'{"model": "m", "messages": []}',
        created_at=1.5,
        total_s=0.02,
    )


async def _writer(tmp_path: Path, inline: bool = False) -> tuple[GroupWriter, list[str], str]:
    store = SqliteStore(tmp_path / "s.db")
    rollout = await store.create_rollout()
    await store.close()
    conn = sqlite3.connect(tmp_path / "s.db", isolation_level=None, check_same_thread=False)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    return (
        GroupWriter(conn, str(tmp_path / "s.db"), _CALL_INSERT, CALL_WIDTH, None, inline=inline),
        statements,
        rollout.id,
    )


def _row_write(rollout_id: str, seq: int, id: str | None = None) -> _Write:
    loop = asyncio.get_running_loop()
    row, _ = call_row(_call(rollout_id, seq, id), zstandard.ZstdCompressor())
    return _Write(None, row, loop.create_future(), loop)


def _kinds(statements: list[str]) -> list[str]:
    """The statements run, by first word. A trigger's program is traced again under its
    statement's text, once per row: repeats of one statement are that statement."""
    runs = [s for i, s in enumerate(statements) if i == 0 or s != statements[i - 1]]
    return [s.split(None, 1)[0] for s in runs]


async def _outcomes(group: list[_Write]) -> list[Any]:
    return await asyncio.gather(*(w.future for w in group), return_exceptions=True)


async def test_rows_alone_are_one_statement(tmp_path: Path) -> None:
    writer, statements, rid = await _writer(tmp_path)
    group = [_row_write(rid, seq) for seq in range(5)]
    writer.run_group(group)
    assert await _outcomes(group) == [None] * 5
    assert _kinds(statements) == ["INSERT"] and statements[0].startswith("INSERT INTO calls")
    count = writer.conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    writer.close()
    assert count == 5


async def test_a_bad_row_fails_alone_and_the_good_ones_mark_the_rollout(tmp_path: Path) -> None:
    writer, statements, rid = await _writer(tmp_path)
    group = [
        _row_write(rid, 0),
        _row_write(rid, 0, id="dup-seq"),  # violates (rollout_id, seq)
        _row_write(rid, 1),
    ]
    writer.run_group(group)
    results = await _outcomes(group)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sqlite3.IntegrityError)
    # the batch (undone whole), then each row alone in one transaction; the rows' trigger
    # moved the rollout to running
    assert _kinds(statements) == ["INSERT", "BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
    conn = writer.conn
    assert [r[0] for r in conn.execute("SELECT seq FROM calls ORDER BY seq")] == [0, 1]
    status = conn.execute("SELECT status FROM rollouts WHERE id = ?", (rid,)).fetchone()[0]
    writer.close()
    assert status == str(RolloutStatus.RUNNING)


async def test_other_writes_keep_their_order_and_savepoints(tmp_path: Path) -> None:
    writer, statements, rid = await _writer(tmp_path)
    loop = asyncio.get_running_loop()

    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE rollouts SET reward = 1 WHERE id = ?", (rid,))
        raise ValueError("refused")

    group = [
        _row_write(rid, 0),
        _Write(fail, None, loop.create_future(), loop),
        _row_write(rid, 1),
    ]
    writer.run_group(group)
    results = await _outcomes(group)
    assert results[0] is None and results[2] is None and isinstance(results[1], ValueError)
    failed = ["SAVEPOINT", "UPDATE", "ROLLBACK", "RELEASE"]  # the write's, undone
    assert _kinds(statements) == ["BEGIN", "INSERT", *failed, "INSERT", "COMMIT"]
    reward = writer.conn.execute("SELECT reward FROM rollouts").fetchone()[0]
    writer.close()
    assert reward is None  # the failed write's update was rolled back


async def test_an_idle_writer_commits_a_row_inline_and_a_busy_one_queues_it(
    tmp_path: Path,
) -> None:
    writer, statements, rollout_id = await _writer(tmp_path, inline=True)
    other = sqlite3.connect(tmp_path / "s.db")  # another reader: the row is committed

    def rows() -> int:
        return int(other.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    compressor = zstandard.ZstdCompressor()
    row, _ = call_row(_call(rollout_id, 0), compressor)
    await writer.insert(row)
    assert writer.inline_rows == 1 and rows() == 1
    # the row is its own transaction; its trigger marks the rollout running
    assert _kinds(statements) == ["INSERT"]
    status = other.execute("SELECT status FROM rollouts").fetchone()[0]
    assert status == str(RolloutStatus.RUNNING)

    dup, _ = call_row(_call(rollout_id, 0, id="dup-seq"), compressor)
    try:
        await writer.insert(dup)
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("a duplicate seq committed inline")
    assert rows() == 1

    # A group in progress holds the connection: the next row waits its turn on the thread.
    writer._conn_lock.acquire()
    queued = asyncio.ensure_future(writer.insert(call_row(_call(rollout_id, 1), compressor)[0]))
    await asyncio.sleep(0.05)
    assert not queued.done() and rows() == 1
    writer._conn_lock.release()
    await asyncio.wait_for(queued, 10)
    assert writer.inline_rows == 1 and rows() == 2
    writer.close()
    other.close()


async def test_a_store_under_full_synchronous_never_commits_inline(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous="FULL")
    rollout = await store.create_rollout()
    await store.record_call(_call(rollout.id, 0))
    assert store._writer.inline_rows == 0
    await store.close()
    normal = SqliteStore(tmp_path / "s.db")
    await normal.record_call(_call(rollout.id, 1))
    assert normal._writer.inline_rows == 1
    assert [c.seq for c in await normal.calls(rollout.id)] == [0, 1]
    await normal.close()


async def test_a_call_commits_inline_only_when_no_other_is_in_flight(tmp_path: Path) -> None:
    """Prepared and not yet recorded, a call is in flight: while one is, a recorded row
    waits for the writer thread (rows arriving meanwhile would share its commit)."""
    store = SqliteStore(tmp_path / "s.db")
    rollout = await store.create_rollout()
    first, second = _call(rollout.id, 0), _call(rollout.id, 1)
    prepared = [store.prepare_call(first), store.prepare_call(second)]
    await store.record_call(first, prepared[0])
    assert store._writer.inline_rows == 0  # the second was in flight
    await store.record_call(second, prepared[1])
    assert store._writer.inline_rows == 1  # alone now
    third = _call(rollout.id, 2)
    dropped = store.prepare_call(third)  # a call abandoned before its record...
    del dropped  # ...leaves the calls in flight with its columns
    await store.record_call(third)
    assert store._writer.inline_rows == 2
    assert [c.seq for c in await store.calls(rollout.id)] == [0, 1, 2]
    await store.close()
