"""WAL checkpoints under steady writes: the WAL restarts, so it stays bounded."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import zstandard

from openforge.store import CallRecord, CallStatus, SqliteStore
from openforge.store.checkpoint import WalCheckpointer
from openforge.store.rows import CALL_WIDTH, call_row
from openforge.store.sqlite import _CALL_INSERT
from openforge.store.writer import GroupWriter


def _salt(wal: str) -> int:
    """The WAL header's first salt: SQLite adds one to it each time the WAL restarts."""
    with open(wal, "rb") as f:
        return int.from_bytes(f.read(20)[16:20], "big")


def _call(rollout_id: str, seq: int) -> CallRecord:
    return CallRecord(
        id=f"c{seq}",
        rollout_id=rollout_id,
        seq=seq,
        dialect="openai_chat",
        status=CallStatus.OK,
        prompt_ids=list(range(seq, seq + 500)),
        output_ids=[5, seq],
        output_logprobs=[-0.5, 0.0],
        request_model="m",
        raw_request=os.urandom(3000),  # incompressible: a few pages a row
        created_at=1.5,
        total_s=0.02,
    )


async def _restarts(tmp_path: Path, restart_frames: int) -> tuple[int, int]:
    """How often the WAL restarted under back-to-back inline writes, and the
    checkpointer's catch-ups: writes go on until it caught up once (at most 2,000), then
    20 more."""
    path = str(tmp_path / "s.db")
    store = SqliteStore(path)
    rollout = await store.create_rollout()
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    writes = threading.Lock()
    checkpointer = WalCheckpointer(
        path, writes, every_writes=8, idle_s=60.0, restart_frames=restart_frames
    )
    writer = GroupWriter(
        conn, path, _CALL_INSERT, CALL_WIDTH, checkpointer, inline=True, lock=writes
    )
    compressor = zstandard.ZstdCompressor()
    await writer.insert(call_row(_call(rollout.id, 0), compressor)[0])
    first = _salt(path + "-wal")
    seq, last = 1, 2000
    while seq < last:  # steady traffic: the next write starts as soon as one commits
        await writer.insert(call_row(_call(rollout.id, seq), compressor)[0])
        seq += 1
        if checkpointer.catch_ups and last == 2000:
            last = seq + 20
    writer.close()
    checkpointer.close()
    restarted = (_salt(path + "-wal") - first) % (1 << 32)
    conn.close()
    return restarted, checkpointer.catch_ups


async def test_the_wal_restarts_under_steady_writes(tmp_path: Path) -> None:
    # Passive checkpoints alone copy every frame committed before they began, but a write
    # has always begun meanwhile, so the WAL never restarted (and grew by every write).
    restarted, catch_ups = await _restarts(tmp_path, restart_frames=16)
    assert catch_ups > 0 and restarted > 0
