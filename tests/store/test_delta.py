"""Calls stored relative to an earlier call of their rollout (store/delta.py): exact round
trips through both stores however calls arrive, rows that stay small as a rollout grows,
and the byte and id arithmetic underneath."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.overlap import shared_prefix, shared_suffix
from openforge.store import CallRecord, CallStatus, RolloutStatus, Store, StoreError
from openforge.store.delta import (
    Bases,
    StoredBase,
    _shared_ids,
    best_root,
    choose_delta,
    ids_text,
    joined_text,
    splice,
)
from openforge.store.location import open_store
from openforge.store.schemas import CallRole

_TOOLS = [{"name": f"tool_{i}", "description": "d" * 300, "input_schema": {}} for i in range(8)]
_SYSTEM = "You are an agent working in a shell. " * 60


class Agent:
    """One rollout as a harness and the gateway make it: each call re-sends the whole
    conversation (tools after the messages, as Anthropic bodies have them) with one more
    tool result, and its prompt ids extend the previous call's prompt and output ids."""

    def __init__(
        self, rollout_id: str, role: CallRole = CallRole.POLICY, tag: str = "", text: str = ""
    ) -> None:
        """``text``: how the prompt's JSON comes along ("" none, "json" as the gateway
        sends it, "wrong" one that does not hold the prompt's ids)."""
        self.rollout_id, self.role, self.tag, self.text = rollout_id, role, tag, text
        self.messages: list[dict[str, object]] = [{"role": "user", "content": f"task {tag}"}]
        self.ids: list[int] = [100 + i for i in range(900)]  # system prompt and tools

    def call(self, seq: int) -> CallRecord:
        result = f"result {self.tag} {seq}: " + "line of output\n" * (40 + seq)
        self.messages.append({"role": "user", "content": result})
        self.ids = self.ids + [1000 + (seq * 7 + i) % 5000 for i in range(60 + seq)]
        body = {"model": "m", "system": _SYSTEM, "messages": self.messages, "tools": _TOOLS}
        output = [7, 8, seq % 50, 9]
        call = CallRecord(
            id=f"call-{self.rollout_id}-{self.role}-{seq}",
            rollout_id=self.rollout_id,
            seq=seq,
            dialect="anthropic",
            status=CallStatus.OK,
            prompt_ids=list(self.ids),
            output_ids=output,
            output_logprobs=[-0.5] * len(output),
            raw_request=orjson.dumps(body),
            conversation={"system": _SYSTEM, "messages": list(self.messages), "tools": _TOOLS},
            completion={"text": f"answer {seq}"},
            response_id=f"msg_{self.tag}{seq}",
            role=self.role,
        )
        if self.text == "json":
            call.prompt_json = orjson.dumps(self.ids)
        elif self.text == "wrong":  # cut short: its last id is not the prompt's
            call.prompt_json = orjson.dumps(self.ids[:-1])
        self.ids = self.ids + output  # the next prompt carries this answer's ids
        self.messages.append({"role": "assistant", "content": f"answer {seq}"})
        return call


def _rows(location: str, rollout_id: str) -> list[tuple[int, bytes | None]]:
    """(stored bytes of prompt ids, raw request and conversation; delta) per call."""
    sql = (
        "SELECT length(prompt_ids) + length(raw_request) + length(conversation), delta"
        " FROM calls WHERE rollout_id = {} ORDER BY seq"
    )
    if location.startswith("postgresql"):
        with psycopg.connect(location) as conn:
            return [(r[0], r[1]) for r in conn.execute(sql.format("%s"), (rollout_id,))]
    with sqlite3.connect(location) as conn:
        return [(r[0], r[1]) for r in conn.execute(sql.format("?"), (rollout_id,))]


@pytest.mark.parametrize("text", ["", "json", "wrong"])
async def test_a_growing_rollout_round_trips_exactly_in_rows_that_stay_small(
    location: str, text: str
) -> None:
    store: Store = open_store(location)
    r = await store.create_rollout()
    agent, recorded = Agent(r.id, text=text), []
    for seq in range(12):
        recorded.append(agent.call(seq))
        await store.record_call(recorded[-1])
    await store.close()
    store = open_store(location)  # read back by a store that never saw them written
    try:
        assert await store.calls(r.id) == recorded
        middle = await store.call_by_response_id(r.id, "msg_6")
        assert middle == recorded[6]
        without_ids = await store.calls(r.id, tokens=False)
        assert [c.raw_request for c in without_ids] == [c.raw_request for c in recorded]
        assert [c.conversation for c in without_ids] == [c.conversation for c in recorded]
    finally:
        await store.close()
    rows = _rows(location, r.id)
    assert rows[0][1] is None and all(delta is not None for _, delta in rows[1:])
    whole = 4 * len(recorded[-1].prompt_ids) + len(recorded[-1].raw_request)
    # The last row holds its new turn, not the 12-call history: a few KB of ~30 KB.
    assert rows[-1][0] < whole / 4
    assert rows[-1][0] < 2 * rows[1][0]  # flat in the history


async def test_calls_committed_out_of_order_and_roles_apart(location: str) -> None:
    store: Store = open_store(location)
    r = await store.create_rollout()
    policy, judge = Agent(r.id, tag="p"), Agent(r.id, CallRole.JUDGE, tag="j")
    calls = [policy.call(0), judge.call(1), policy.call(2), policy.call(3), judge.call(4)]
    # seq 3 commits before seq 2 (parallel calls): seq 2 is then stored against seq 3.
    for i in (0, 1, 3, 2, 4):
        await store.record_call(calls[i])
    # A call that shares nothing with the rollout's last one (a new sub-agent) is whole.
    stranger = Agent(r.id, tag="s").call(5)
    stranger.prompt_ids = [4000 + i for i in range(500)]
    stranger.raw_request = orjson.dumps({"other": "x" * 5000})
    stranger.conversation = {"messages": [{"role": "user", "content": "y" * 5000}]}
    await store.record_call(stranger)
    try:
        assert await store.calls(r.id) == [*calls, stranger]
        assert await store.call_by_response_id(r.id, "msg_p2") == calls[2]
        assert await store.call_by_response_id(r.id, "msg_j4") == calls[4]
    finally:
        await store.close()
    deltas = [orjson.loads(d) if d is not None else None for _, d in _rows(location, r.id)]
    assert deltas[0] is None and deltas[1] is None  # first policy and first judge call
    assert deltas[2] is not None and deltas[2]["base"] == calls[3].id
    assert deltas[3] is not None and deltas[3]["base"] == calls[0].id
    assert deltas[4] is not None and deltas[4]["base"] == calls[1].id  # the judge's own
    assert deltas[5] is None


async def test_a_finished_rollouts_late_call_and_concurrent_calls(location: str) -> None:
    store: Store = open_store(location)
    r = await store.create_rollout()
    agent = Agent(r.id)
    calls = [agent.call(i) for i in range(8)]
    await asyncio.gather(*(store.record_call(c) for c in calls[:6]))
    await store.finish_rollout(r.id, RolloutStatus.COMPLETED, 1.0)
    late = calls[6]
    late.status = CallStatus.LATE
    # Its base was forgotten with the finish; an earlier whole call (calls recorded at
    # once may all be) is a root it is stored against.
    await store.record_call(late)
    try:
        assert await store.calls(r.id) == calls[:7]
    finally:
        await store.close()
    rows = _rows(location, r.id)
    assert rows[6][1] is not None
    base = orjson.loads(rows[6][1])["base"]
    assert base in [c.id for c in calls[:6]] and rows[int(base.rsplit("-", 1)[1])][1] is None


async def test_request_columns_prepared_before_the_answer(location: str) -> None:
    """What a gateway prepares while the engine generates (prepare_call, before the output
    exists) records the same calls as record_call alone: also when a later call of the
    rollout commits in between (the older base stays valid), and when the call changed
    since (its columns are recomputed)."""
    store: Store = open_store(location)
    r = await store.create_rollout()
    agent = Agent(r.id)
    calls = [agent.call(i) for i in range(5)]

    def request_only(c: CallRecord) -> CallRecord:
        return CallRecord(
            id=c.id, rollout_id=c.rollout_id, seq=c.seq, dialect=c.dialect, status=c.status,
            prompt_ids=c.prompt_ids, raw_request=c.raw_request, conversation=c.conversation,
            role=c.role,
        )  # fmt: skip

    await store.record_call(calls[0], store.prepare_call(request_only(calls[0])))
    # Prepared against call 0; call 2 commits first and becomes the rollout's newest base.
    early = store.prepare_call(request_only(calls[1]))
    await store.record_call(calls[2], store.prepare_call(request_only(calls[2])))
    await store.record_call(calls[1], early)
    # Prepared for another body than the one recorded: not used.
    stale = store.prepare_call(request_only(calls[3]))
    calls[3].raw_request += b" "
    await store.record_call(calls[3], stale)
    # Prepared for another call: not used either.
    await store.record_call(calls[4], store.prepare_call(request_only(calls[2])))
    await store.close()
    store = open_store(location)
    try:
        assert await store.calls(r.id) == calls
    finally:
        await store.close()
    deltas = [orjson.loads(d) if d is not None else None for _, d in _rows(location, r.id)]
    assert deltas[0] is None
    assert [d["base"] for d in deltas[1:] if d is not None] == [
        calls[0].id, calls[0].id, calls[1].id, calls[3].id
    ]  # fmt: skip


async def test_first_calls_are_stored_against_a_root_of_other_rollouts(location: str) -> None:
    """A rollout's first call has no base of its own; rollouts of one harness start alike,
    so it is stored against a whole call of another rollout (a root), the one sharing
    the longest start of its prompt, and reads back exactly through a store that never
    saw it written, with and without ids."""
    store: Store = open_store(location)
    a, b, c = [await store.create_rollout() for _ in range(3)]
    first = Agent(a.id, tag="a")
    a_calls = [first.call(i) for i in range(3)]
    for call in a_calls:
        await store.record_call(call)
    # Another harness (other system prompt and tools: other ids, other body), newer.
    other = Agent(c.id, tag="c")
    other.ids = [6000 + i for i in range(900)]
    other_call = other.call(0)
    other_call.raw_request = orjson.dumps({"other": "harness", "pad": "z" * 9000})
    await store.record_call(other_call)
    second = Agent(b.id, tag="b")
    b_calls = [second.call(i) for i in range(3)]
    for call in b_calls:
        await store.record_call(call)
    await store.close()
    store = open_store(location)
    try:
        assert await store.calls(b.id) == b_calls
        assert await store.call_by_response_id(b.id, "msg_b1") == b_calls[1]
        without_ids = await store.calls(b.id, tokens=False)
        assert [x.raw_request for x in without_ids] == [x.raw_request for x in b_calls]
        assert [x.conversation for x in without_ids] == [x.conversation for x in b_calls]
        assert await store.calls(a.id) == a_calls
        assert await store.calls(c.id) == [other_call]
    finally:
        await store.close()
    rows = _rows(location, b.id)
    deltas = [orjson.loads(d) if d is not None else None for _, d in rows]
    assert deltas[0] is not None and deltas[0]["base"] == a_calls[0].id
    assert [d["base"] for d in deltas[1:] if d is not None] == [b_calls[0].id, b_calls[1].id]
    assert _rows(location, c.id)[0][1] is None  # shares too little with a's: whole
    whole = 4 * len(b_calls[0].prompt_ids) + len(b_calls[0].raw_request)
    assert rows[0][0] < whole / 4


async def test_a_missing_root_is_an_error_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store: Store = open_store(path)
    a, b = await store.create_rollout(), await store.create_rollout()
    root = Agent(a.id, tag="a").call(0)
    await store.record_call(root)
    await store.record_call(Agent(b.id, tag="b").call(0))
    await store.close()
    await _reading_names_the_deleted_base(path, root.id, b.id)


async def test_a_missing_base_is_an_error_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store: Store = open_store(path)
    r = await store.create_rollout()
    agent = Agent(r.id)
    calls = [agent.call(i) for i in range(3)]
    for c in calls:
        await store.record_call(c)
    await store.close()
    await _reading_names_the_deleted_base(path, calls[1].id, r.id)


async def _reading_names_the_deleted_base(path: str, base_id: str, rollout_id: str) -> None:
    """Delete call ``base_id`` by hand: reading ``rollout_id`` is the error naming it."""
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM calls WHERE id = ?", (base_id,))
    store = open_store(path)
    try:
        with pytest.raises(StoreError, match=f"base call {base_id} is not stored"):
            await store.calls(rollout_id)
    finally:
        await store.close()


def _naive_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200), st.binary(max_size=50))
def test_shared_ends_and_splice(base: bytes, new: bytes, common: bytes) -> None:
    for a, b in ((base, new), (common + base + common, common + new + common)):
        p = shared_prefix(a, b)
        assert p == _naive_prefix(a, b)
        s = shared_suffix(a, b, min(len(a), len(b)) - p)
        assert p + s <= min(len(a), len(b))
        assert s == min(_naive_prefix(a[::-1], b[::-1]), min(len(a), len(b)) - p)
        assert splice(a, (p, s), b[p : len(b) - s], "c") == b


@given(st.integers(1, 5000), st.data())
def test_shared_ends_of_long_strings_differing_in_one_byte(size: int, data: st.DataObject) -> None:
    a = bytes(i * 7 % 251 for i in range(size))
    at = data.draw(st.integers(0, size - 1))
    tail = data.draw(st.binary(max_size=3))
    b = a[:at] + bytes([a[at] ^ 1]) + a[at + 1 :] + tail
    assert shared_prefix(a, b) == shared_prefix(b, a) == at
    assert shared_prefix(a, a + tail) == size
    if not tail:
        assert shared_suffix(a, b, size) == size - at - 1
        assert shared_suffix(a, b, 3) == min(3, size - at - 1)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 300), max_size=40),
    st.lists(st.integers(0, 300), max_size=10),
    st.lists(st.integers(0, 300), max_size=40),
)
def test_shared_ids_from_text(prompt: list[int], output: list[int], new: list[int]) -> None:
    """Ids compared as their JSON text (3 against 34, 1 against 10...) share exactly the
    leading ids the lists share."""
    text = joined_text(ids_text(prompt), ids_text(output))
    base = StoredBase("b", text, len(prompt) + len(output), b"", b"")
    both = prompt + output
    for call in (new, both + new, both[: len(both) // 2] + new, prompt):
        n = _shared_ids(ids_text(call), len(call), base)
        assert both[:n] == call[:n] and (n == min(len(both), len(call)) or both[n] != call[n])


_ID_TEXT = st.text(alphabet="12,", max_size=12).map(str.encode)  # texts that share starts


@settings(max_examples=300, deadline=None)
@given(st.lists(_ID_TEXT, max_size=6), _ID_TEXT)
def test_best_root_shares_the_longest_start(texts: list[bytes], prompt: bytes) -> None:
    """Whatever the order, the first of the roots sharing the most bytes (the later ones
    skipped by one comparison past the best must agree with a bisection of each)."""
    roots = [StoredBase(f"r{i}", t, 1, b"", b"") for i, t in enumerate(texts)]
    shares = [_naive_prefix(t, prompt) for t in texts]
    best = best_root(roots, prompt)
    if not any(shares):
        assert best is None
    else:
        assert best is roots[shares.index(max(shares))]


def test_a_base_that_shares_little_is_not_used() -> None:
    base = StoredBase("b", ids_text([*range(1000), 1]), 1001, b"x" * 4000, b"y" * 4000)
    other = ids_text(range(2000, 3000))
    assert choose_delta(base, "c", other, 1000, b"z" * 4000, b"w" * 4000) is None
    prompt = ids_text([*range(1000), 1, 5])
    delta = choose_delta(base, "c", prompt, 1002, b"x" * 4000 + b"!", b"y" * 4001)
    assert delta is not None and delta.prompt_ids == 1001
    assert choose_delta(None, "c", b"1", 1, b"", b"") is None
    with pytest.raises(StoreError, match="does not fit"):
        splice(b"abc", (2, 2), b"", "c")


def test_a_finished_rollouts_bases_go_in_every_role_and_no_others() -> None:
    bases = Bases()
    stored = {r: StoredBase(f"call-{r}", b"1", 1, b"", b"") for r in ("a", "b")}
    for rollout, base in stored.items():
        for role in CallRole:
            bases.put(rollout, str(role), base)
    bases.drop("a")
    assert all(bases.get("a", str(role)) is None for role in CallRole)
    assert all(bases.get("b", str(role)) is stored["b"] for role in CallRole)
    bases.drop("never-seen")
    assert bases.get("b", "policy") is stored["b"]
