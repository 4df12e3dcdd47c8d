"""Schema migrations: a v1 store file migrates to the current schema; others are refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from openforge.store import SchemaMismatch, SqliteStore
from openforge.store.migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from openforge.store.schemas import CallRole, Flag, FlagSeverity, RolloutStatus
from openforge.traces.source import open_store

# The v1 schema as released (frozen here: the code only knows the current DDL).
_V1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE rollouts (
    id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, status TEXT NOT NULL, task_id TEXT,
    group_id TEXT, reward REAL, metadata TEXT NOT NULL, created_at REAL NOT NULL,
    finished_at REAL, details TEXT NOT NULL
);
CREATE INDEX rollouts_group ON rollouts(group_id);
CREATE INDEX rollouts_status ON rollouts(status);
CREATE TABLE calls (
    id TEXT PRIMARY KEY, rollout_id TEXT NOT NULL REFERENCES rollouts(id),
    seq INTEGER NOT NULL, dialect TEXT NOT NULL, status TEXT NOT NULL, prompt_ids BLOB,
    output_ids BLOB, output_logprobs BLOB, prompt_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, finish_reason TEXT, request_model TEXT NOT NULL,
    engine TEXT NOT NULL, served_model TEXT NOT NULL, weight_version TEXT NOT NULL,
    fork INTEGER NOT NULL, render_info TEXT NOT NULL, raw_request BLOB,
    conversation TEXT NOT NULL, completion TEXT NOT NULL, error TEXT, harness TEXT NOT NULL,
    created_at REAL NOT NULL, queued_s REAL NOT NULL, first_token_s REAL, total_s REAL NOT NULL
);
CREATE UNIQUE INDEX calls_rollout_seq ON calls(rollout_id, seq);
INSERT INTO schema_version VALUES (1);
INSERT INTO rollouts VALUES ('ro_1', 'k1', 'completed', 't', 'g', 1.0, '{}', 1.0, 2.0, '{}');
INSERT INTO rollouts VALUES
    ('ro_2', 'k2', 'completed', 't', 'g', 0.0, '{"run_id": "run-7"}', 1.0, 2.0, '{}');
"""


def _v1_store(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_V1)
    ids = (b"\x01\x00\x00\x00\x02\x00\x00\x00", b"\x07\x00\x00\x00")
    conn.execute(
        "INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            "c0",
            "ro_1",
            0,
            "openai_chat",
            "ok",
            ids[0],
            ids[1],
            b"\x00\x00\x00\x00",
            2,
            1,
            "stop",
            "m",
            "scripted",
            "m",
            "0",
            0,
            "{}",
            None,
            '{"messages":[]}',
            '{"text":"hi"}',
            None,
            "{}",
            1.5,
            0.0,
            0.01,
            0.02,
        ),
    )
    conn.commit()
    conn.close()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT version FROM schema_version").fetchone()[0])
    finally:
        conn.close()


async def test_v1_store_migrates_with_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v1_store(path)
    store = SqliteStore(path)
    calls = await store.calls("ro_1")
    assert [(c.id, c.prompt_ids, c.output_ids, c.response_id) for c in calls] == [
        ("c0", [1, 2], [7], None)
    ]
    assert calls[0].completion == {"text": "hi"}
    # The new column works: a call recorded now can be found by its answer's id.
    await store.record_call(
        type(calls[0])(
            id="c1",
            rollout_id="ro_1",
            seq=1,
            dialect="openai_responses",
            status=calls[0].status,
            response_id="resp_abc",
        )
    )
    found = await store.call_by_response_id("ro_1", "resp_abc")
    assert await store.call_by_response_id("ro_other", "resp_abc") is None
    assert found is not None and found.id == "c1"
    # v4: the old calls are the policy's; role keys work on the migrated file.
    assert calls[0].role is CallRole.POLICY
    fresh = await store.create_rollout()
    key = await store.mint_role_key(fresh.id, CallRole.JUDGE)
    assert await store.rollout_by_role_key(key) == (fresh, CallRole.JUDGE)
    # v6: a call's insert moves its created rollout to running, and no finished one back.
    for call_id, rollout_id in (("c2", fresh.id), ("c3", "ro_1")):
        await store.record_call(
            type(calls[0])(
                id=call_id,
                rollout_id=rollout_id,
                seq=5,
                dialect="openai_chat",
                status=calls[0].status,
            )
        )
    # v7: rollouts from before have no reward-hack flags, and take them.
    assert (await store.get_rollout("ro_1")).flags == []
    flag = Flag("reward-file", FlagSeverity.HIGH, "call 0", "bash: echo 1 > reward.txt")
    assert (await store.flag_rollout("ro_1", [flag])).flags == [flag]
    # v8: the run is read from the metadata the orchestrator wrote; no split was recorded.
    runs = [(r.id, r.run_id, r.split) for r in await store.rollouts(group_id="g")]
    assert runs == [("ro_1", None, None), ("ro_2", "run-7", None)]
    await store.close()
    assert _version(path) == SCHEMA_VERSION
    backup = tmp_path / "old.db.v1.bak"
    assert _version(backup) == 1  # the untouched copy from before
    conn = sqlite3.connect(backup)
    assert conn.execute("SELECT id FROM calls").fetchall() == [("c0",)]
    conn.close()
    reopened = SqliteStore(path)  # current now: opens without another backup
    statuses = [(await reopened.get_rollout(r)).status for r in (fresh.id, "ro_1")]
    assert statuses == [RolloutStatus.RUNNING, RolloutStatus.COMPLETED]
    await reopened.close()
    assert not (tmp_path / "old.db.v1.bak1").exists()


async def test_failed_migration_leaves_the_store_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _v1_store(path)
    real = MIGRATIONS[2].apply

    def broken(conn: sqlite3.Connection) -> None:
        real(conn)  # the real step runs, then something after it fails
        raise sqlite3.OperationalError("disk on fire")

    monkeypatch.setitem(MIGRATIONS, 2, Migration(2, "broken", broken))
    with pytest.raises(SchemaMismatch, match=r"failed .*disk on fire.*unchanged"):
        SqliteStore(path)
    assert _version(path) == 1
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(calls)")]
    conn.close()
    assert "response_id" not in columns  # the ALTER TABLE was rolled back with the rest


async def test_unknown_versions_are_refused_clearly(tmp_path: Path) -> None:
    v0 = tmp_path / "v0.db"
    conn = sqlite3.connect(v0)
    conn.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (0);"
    )
    conn.close()
    with pytest.raises(SchemaMismatch, match="version 0 and no migration"):
        SqliteStore(v0)
    assert _version(v0) == 0 and not list(tmp_path.glob("*.bak*"))
    newer = tmp_path / "newer.db"
    _v1_store(newer)
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatch, match="newer than this OpenForge"):
        open_store(newer)  # what `openforge traces` relies on


async def test_backup_failure_refuses(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v1_store(path)
    (tmp_path / "old.db.v1.bak").mkdir()  # taken, and so is every later name we try...
    for n in range(1, 3):
        (tmp_path / f"old.db.v1.bak{n}").mkdir()
    # ...except the next one, which we make unwritable by making it a dangling directory link
    (tmp_path / "old.db.v1.bak3").symlink_to(tmp_path / "missing" / "x")
    with pytest.raises(SchemaMismatch, match=r"backing it up .* failed"):
        SqliteStore(path)
    assert _version(path) == 1
