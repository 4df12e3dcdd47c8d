"""Both stores, SQLite and PostgreSQL (a real server: tests/conftest.py), held to the same
semantics: round trips, finish, one bad write, seq allocation, rollout-scoped response ids,
durability under SIGKILL; and each one's schema checks."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from openforge.store import (
    CallRecord,
    CallStatus,
    RolloutConflict,
    RolloutNotFound,
    RolloutStatus,
    SchemaMismatch,
    SqliteStore,
    Store,
)
from openforge.store.location import open_store
from openforge.store.pgschema import PG_SCHEMA_VERSION
from openforge.store.schemas import (
    TRAINING,
    CallRole,
    ControlState,
    Flag,
    FlagSeverity,
    RolloutSelection,
)
from openforge.store.shared import Weights


def _call(rollout_id: str, seq: int, **kw: object) -> CallRecord:
    base: dict[str, object] = dict(
        id=f"c_{rollout_id}_{seq}",
        rollout_id=rollout_id,
        seq=seq,
        dialect="anthropic",
        status=CallStatus.OK,
        prompt_ids=[1, 2, 3, 70000 + seq],
        output_ids=[5, 6, seq],
        output_logprobs=[-0.5, -0.25, 0.0],
        finish_reason="tool_calls",
        request_model="claude-sonnet",
        raw_request=b'{"model": "claude-sonnet", "messages": []}' * 20,
        conversation={"messages": [{"role": "user", "content": "hi"}]},
        completion={"text": "ok", "tool_calls": []},
        harness={"user-agent": "claude-cli/2.1.197"},
        render_info={"fork_reason": None},
        created_at=1.5,
        first_token_s=0.01,
        total_s=0.02,
    )
    base.update(kw)
    return CallRecord(**base)  # type: ignore[arg-type]


async def test_round_trip(location: str) -> None:
    store: Store = open_store(location)
    r = await store.create_rollout(task_id="t1", group_id="g1", metadata={"a": 1})
    assert len(r.key) >= 32 and r.status is RolloutStatus.CREATED
    assert await store.rollout_by_key(r.key) is not None
    assert await store.rollout_by_key("nope") is None
    calls = [_call(r.id, i) for i in range(5)]
    await asyncio.gather(*(store.record_call(c) for c in calls))
    await store.close()

    store2 = open_store(location)
    got = await store2.calls(r.id)
    assert [c.seq for c in got] == list(range(5))
    assert got[3] == calls[3]
    assert (await store2.rollout_by_key(r.key)).status is RolloutStatus.RUNNING  # type: ignore[union-attr]
    bare = await store2.calls(r.id, tokens=False)
    assert bare[0].prompt_ids == [] and bare[0].completion == {"text": "ok", "tool_calls": []}
    assert await store2.next_seq(r.id) == 5
    assert await store2.allocate_seq(r.id) == 5
    assert [x.id for x in await store2.rollouts(group_id="g1")] == [r.id]
    await store2.close()


async def test_finish_is_idempotent_and_conflicts(location: str) -> None:
    store = open_store(location)
    r = await store.create_rollout()
    done = await store.finish_rollout(r.id, RolloutStatus.COMPLETED)
    assert done.status is RolloutStatus.COMPLETED and done.finished_at
    again = await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward=1.0)
    assert again.reward == 1.0
    assert (await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward=1.0)).reward == 1.0
    with pytest.raises(RolloutConflict):
        await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward=0.0)
    with pytest.raises(RolloutConflict):
        await store.finish_rollout(r.id, RolloutStatus.TIMEOUT)
    with pytest.raises(RolloutNotFound):
        await store.finish_rollout("ro_missing", RolloutStatus.TIMEOUT)
    with pytest.raises(RolloutNotFound):
        await store.get_rollout("ro_missing")
    assert [x.id for x in await store.rollouts([RolloutStatus.COMPLETED])] == [r.id]
    await store.close()


async def test_flags_are_replaced_in_any_status_and_survive_reopening(location: str) -> None:
    """The reward-hack monitor's flags: set after the finish, replaced whole, cleared with
    []; every read (by id, key, listing, a fresh process) sees the same."""
    store = open_store(location)
    r = await store.create_rollout(task_id="t")
    assert r.flags == []
    await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward=1.0)
    flags = [
        Flag("verifier-files", FlagSeverity.HIGH, "call 0", "bash: cat .openforge-verify/v.py"),
        Flag("git-other-commits", FlagSeverity.MEDIUM, "transcript turn 2", "git log --all"),
    ]
    got = await store.flag_rollout(r.id, flags)
    assert got.flags == flags and got.status is RolloutStatus.COMPLETED and got.reward == 1.0
    assert (await store.get_rollout(r.id)).flags == flags
    with pytest.raises(RolloutNotFound):
        await store.flag_rollout("ro_missing", flags)
    await store.close()
    store = open_store(location)
    assert (await store.get_rollout(r.id)).flags == flags
    assert [x.flags for x in await store.rollouts()] == [flags]
    assert (await store.rollout_by_key(r.key)).flags == flags  # type: ignore[union-attr]
    assert (await store.flag_rollout(r.id, flags[1:])).flags == flags[1:]
    assert (await store.flag_rollout(r.id, [])).flags == []
    await store.close()
    store = open_store(location)
    assert (await store.get_rollout(r.id)).flags == []
    await store.close()


async def test_one_bad_write_does_not_sink_its_group(location: str) -> None:
    store = open_store(location)
    r = await store.create_rollout()
    results = await asyncio.gather(
        store.record_call(_call(r.id, 0)),
        store.record_call(_call(r.id, 0, id="dup-seq")),  # violates (rollout_id, seq)
        store.record_call(_call(r.id, 1)),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sqlite3.IntegrityError | psycopg.errors.IntegrityError)
    assert [c.seq for c in await store.calls(r.id)] == [0, 1]
    await store.close()


async def test_schema_version_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatch, match="newer than this OpenForge"):
        SqliteStore(path)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatch, match="not an OpenForge store"):
        SqliteStore(other)


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from openforge.store import CallRecord, CallStatus
    from openforge.store.location import open_store

    async def main():
        store = open_store(sys.argv[1])
        r = await store.create_rollout()
        for seq in range(int(sys.argv[2])):
            await store.record_call(CallRecord(id=f"c{seq}", rollout_id=r.id, seq=seq,
                dialect="openai_chat", status=CallStatus.OK, output_ids=[seq, seq + 1]))
            print(r.id, seq, flush=True)  # "answered": the call was acknowledged
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_acknowledged_calls_survive_sigkill(location: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, location, "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(20)]
    os.kill(proc.pid, signal.SIGKILL)  # no chance to flush or close anything
    proc.wait()
    proc.stdout.close()
    rollout_id = lines[0].split()[0]
    store = open_store(location)
    calls = await store.calls(rollout_id)
    assert [c.output_ids for c in calls] == [[s, s + 1] for s in range(20)]
    await store.close()


async def test_sqlite_call_summaries(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    r = await store.create_rollout()
    await store.record_call(_call(r.id, 0))
    summary = await store.call_summaries(r.id)
    assert summary[0]["prompt_tokens"] == 4 and summary[0]["output_tokens"] == 3
    await store.close()


async def test_allocate_seq_is_distinct_and_refuses_finished(location: str) -> None:
    store = open_store(location)
    other = open_store(location) if location.startswith("postgresql") else store
    r = await store.create_rollout()
    await store.record_call(_call(r.id, 0))
    seqs = await asyncio.gather(
        *(s.allocate_seq(r.id) for s in [store, other] * 10)
    )  # two processes' worth of stores allocating at once (PostgreSQL)
    assert sorted(seqs) == list(range(1, 21))
    await store.finish_rollout(r.id, RolloutStatus.COMPLETED)
    with pytest.raises(RolloutConflict):
        await other.allocate_seq(r.id)
    with pytest.raises(RolloutNotFound):
        await store.allocate_seq("ro_missing")
    if other is not store:
        await other.close()
    await store.close()


async def test_response_ids_are_scoped_to_their_rollout(location: str) -> None:
    store = open_store(location)
    a, b = await store.create_rollout(), await store.create_rollout()
    await store.record_call(_call(a.id, 0, response_id="resp_a", dialect="openai_responses"))
    found = await store.call_by_response_id(a.id, "resp_a")
    assert found is not None and found.id == f"c_{a.id}_0"
    assert await store.call_by_response_id(b.id, "resp_a") is None  # another rollout's answer
    assert await store.call_by_response_id(a.id, "resp_missing") is None
    await store.close()


async def test_postgres_schema_version_is_checked(postgres_url: str) -> None:
    await open_store(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(SchemaMismatch, match="newer than this OpenForge"):
        open_store(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE schema_version")
    with pytest.raises(SchemaMismatch, match="not an OpenForge store"):
        open_store(postgres_url)


async def test_the_shared_state_reaches_every_process_and_outlasts_them(
    postgres_url: str,
) -> None:
    a, b = open_store(postgres_url), open_store(postgres_url)
    received: asyncio.Queue[ControlState] = asyncio.Queue()

    async def listen() -> None:
        async for state in b.shared.changes():
            await received.put(state)

    listener = asyncio.create_task(listen())
    first = await asyncio.wait_for(received.get(), 10)  # the state as it was on connecting
    paused = await a.shared.change(paused=True)
    loaded = await a.shared.change(weights=Weights("7", "/ckpt/v7"))
    got = [await asyncio.wait_for(received.get(), 10) for _ in range(2)]
    assert got == [paused, loaded]
    assert paused == ControlState(first.epoch + 1, True, first.weight_version)
    assert loaded == ControlState(first.epoch + 2, True, "7", "/ckpt/v7")
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)
    await a.close()
    await b.close()
    # A process that opens the store later reads it; acknowledgements are per replica.
    c = open_store(postgres_url)
    assert await c.shared.state() == loaded
    await c.shared.seen("r1", loaded.epoch)
    await c.shared.seen("r2", loaded.epoch - 1)
    assert await c.shared.behind("me", loaded.epoch, 10.0) == ["r2"]
    assert await c.shared.live_others("r1", 10.0) == 1
    await c.shared.seen("r2", loaded.epoch)
    assert await c.shared.behind("me", loaded.epoch, 10.0) == []
    await c.shared.leave("r2")
    assert await c.shared.live_others("r1", 10.0) == 0
    # Weights set again replace version, path and adapter together.
    cleared = await c.shared.change(paused=False, weights=Weights(None))
    assert cleared == ControlState(loaded.epoch + 1, False, None, None, None)
    await c.close()


async def test_sqlite_shares_its_state_with_its_own_process_only(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    async def collect() -> list[ControlState]:
        return [state async for state in store.shared.changes()]

    changes = asyncio.create_task(collect())
    await asyncio.sleep(0.1)
    state = await store.shared.change(paused=True, weights=Weights("3", "/w", "policy"))
    assert state == ControlState(1, True, "3", "/w", "policy") == await store.shared.state()
    assert await store.shared.behind("me", state.epoch, 10.0) == []  # no one else to wait for
    await asyncio.sleep(0.1)
    await store.close()
    assert await asyncio.wait_for(changes, 5) == [state]  # ... and it ends with the store


async def test_blobs_are_stored_once_by_digest(location: str) -> None:
    import hashlib

    from openforge.store.schemas import Blob

    data = [b"\x89PNG first image", b"\x89PNG second image"]
    blobs = [Blob(hashlib.sha256(d).hexdigest(), "image/png", d) for d in data]
    store: Store = open_store(location)
    await store.put_blobs(blobs)
    await asyncio.gather(*(store.put_blobs([blobs[0]]) for _ in range(5)))  # repeats: no-ops
    await store.put_blobs([])
    await store.close()
    store2 = open_store(location)
    for blob in blobs:
        assert await store2.get_blob(blob.sha256) == blob
    assert await store2.get_blob("0" * 64) is None
    await store2.close()


async def test_role_keys_record_calls_under_the_rollout(location: str) -> None:
    """A judge's key belongs to its rollout, with its role; calls keep the role they were
    made with; a finished rollout gets no new key."""
    store = open_store(location)
    r = await store.create_rollout(task_id="t")
    judge = await store.mint_role_key(r.id, CallRole.JUDGE)
    user = await store.mint_role_key(r.id, CallRole.USER)
    assert len({judge, user, r.key}) == 3 and len(judge) >= 32
    assert await store.rollout_by_key(judge) is None  # never the rollout's own key
    found = await store.rollout_by_role_key(judge)
    assert found is not None and found[0].id == r.id and found[1] is CallRole.JUDGE
    assert (await store.rollout_by_role_key(user))[1] is CallRole.USER  # type: ignore[index]
    assert await store.rollout_by_role_key(r.key) is None
    assert await store.rollout_by_role_key("not-a-key") is None
    await store.record_call(_call(r.id, 0))
    await store.record_call(_call(r.id, 1, role=CallRole.JUDGE))
    await store.record_call(_call(r.id, 2, role=CallRole.USER))
    assert [c.role for c in await store.calls(r.id)] == [
        CallRole.POLICY,
        CallRole.JUDGE,
        CallRole.USER,
    ]
    await store.finish_rollout(r.id, RolloutStatus.COMPLETED, 1.0)
    with pytest.raises(RolloutConflict):
        await store.mint_role_key(r.id, CallRole.JUDGE)
    with pytest.raises(RolloutNotFound):
        await store.mint_role_key("ro_missing", CallRole.JUDGE)
    again = await store.rollout_by_role_key(judge)
    assert again is not None and again[0].status is RolloutStatus.COMPLETED
    await store.close()


async def test_rollouts_by_run_split_and_task(location: str) -> None:
    """Each rollout keeps its run and split; readers select by them (None: unrecorded)."""
    store: Store = open_store(location)
    made = [
        await store.create_rollout("t1", "g", run_id="run-a", split="train"),
        await store.create_rollout("t2", "g", run_id="run-a", split="test"),
        await store.create_rollout("t1", "g", run_id="run-b", split="general"),
        await store.create_rollout("t3", "g"),
    ]
    await store.close()
    store = open_store(location)

    async def ids(selection: RolloutSelection | None) -> list[str]:
        return [r.id for r in await store.rollouts(selection=selection)]

    assert (await store.get_rollout(made[1].id)).split == "test"
    assert (await store.get_rollout(made[1].id)).run_id == "run-a"
    assert await ids(None) == [r.id for r in made]
    assert await ids(TRAINING) == [made[0].id, made[3].id]
    assert await ids(RolloutSelection(runs=("run-a",))) == [made[0].id, made[1].id]
    assert await ids(RolloutSelection(splits=("test", "general"))) == [made[1].id, made[2].id]
    assert await ids(RolloutSelection(runs=("run-a", "run-b"), tasks=("t1",))) == [
        made[0].id,
        made[2].id,
    ]
    assert await ids(RolloutSelection(splits=(None,))) == [made[3].id]
    await store.close()


async def test_postgres_version_1_store_gains_roles(postgres_url: str) -> None:
    """A PostgreSQL store written before roles existed opens, keeps its calls (as policy
    calls) and takes role keys."""
    store = open_store(postgres_url)
    r = await store.create_rollout(metadata={"run_id": "run-old"})
    await store.record_call(_call(r.id, 0))
    await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE rollouts DROP COLUMN run_id")
        conn.execute("ALTER TABLE rollouts DROP COLUMN split")
        conn.execute("ALTER TABLE calls DROP COLUMN role")
        conn.execute("ALTER TABLE calls DROP COLUMN delta")
        conn.execute("DROP TABLE role_keys")
        conn.execute("ALTER TABLE rollouts DROP COLUMN flags")
        conn.execute("UPDATE schema_version SET version = 1")
    store = open_store(postgres_url)
    assert [c.role for c in await store.calls(r.id)] == [CallRole.POLICY]
    key = await store.mint_role_key(r.id, CallRole.USER)
    assert (await store.rollout_by_role_key(key)) is not None
    # version 4: rollouts from before have no flags, and take them
    assert (await store.get_rollout(r.id)).flags == []
    flag = Flag("reward-file", FlagSeverity.HIGH, "call 0", "bash: echo 1 > reward.txt")
    assert (await store.flag_rollout(r.id, [flag])).flags == [flag]
    # version 5: the run comes from the metadata the orchestrator wrote; no split was kept
    old = await store.get_rollout(r.id)
    assert (old.run_id, old.split) == ("run-old", None)
    await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone() == (PG_SCHEMA_VERSION,)
