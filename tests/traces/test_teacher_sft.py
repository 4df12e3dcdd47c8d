"""Teacher calls (engine ``upstream``) go to the SFT export, tokenized form included, and
never to an RL export.

The records are written through the Store API the way the gateway writes a teacher call:
prompt ids from our renderer (with the rollout's history, so a later turn extends the
earlier one), output ids from ``Renderer.encode_reply`` of the teacher's answer, no
logprobs; an SDK retry of the first call and a failed call are recorded too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from openforge.cli import app
from openforge.conversation import Conversation, Message, TextPart, ToolCall, ToolSpec
from openforge.rendering.renderer import Renderer
from openforge.rendering.tokenizer import load_tokenizer
from openforge.store.schemas import CallRecord, CallStatus, RolloutStatus
from openforge.store.sqlite import SqliteStore

from .store_data import MODEL_DIR

runner = CliRunner()
TOOLS = [ToolSpec("bash", "Run a shell command.", {"type": "object", "properties": {}})]


def _teacher_call(
    rollout_id: str,
    seq: int,
    conv: Conversation,
    prompt: list[int],
    answer: Message,
    output: list[int],
    **kw: Any,
) -> CallRecord:
    completion = {
        "text": "".join(p.text for p in answer.content if isinstance(p, TextPart)),
        "reasoning": None,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in answer.tool_calls
        ],
        "finish_reason": "tool_calls" if answer.tool_calls else "stop",
    }
    return CallRecord(
        id=f"{rollout_id}-t{seq}",
        rollout_id=rollout_id,
        seq=seq,
        dialect="openai_chat",
        status=kw.pop("status", CallStatus.OK),
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=[],
        engine="upstream",
        served_model=str(MODEL_DIR),
        conversation=orjson.loads(orjson.dumps(conv)),
        completion=completion,
        **kw,
    )


async def _build(path: Path) -> dict[str, Any]:
    renderer = Renderer(load_tokenizer(MODEL_DIR))
    store = SqliteStore(path)
    teacher = await store.create_rollout(task_id="t9", group_id="g9")
    history = renderer.new_history()
    system = Message("system", [TextPart("You are a coding agent.")])
    user = Message("user", [TextPart("Run echo hi.")])
    conv1 = Conversation([system, user], tools=TOOLS)
    ask = Message(
        "assistant",
        [TextPart("Let me run it.")],
        [ToolCall("call_up1", "bash", '{"command": "echo hi"}')],
    )
    p1 = renderer.render(conv1, history)
    o1 = renderer.encode_reply("Let me run it.", None, ask.tool_calls, validate=False)
    history.record(p1, o1, ask)
    conv2 = Conversation(
        [system, user, ask, Message("tool", [TextPart("hi")], tool_call_id="call_up1")],
        tools=TOOLS,
    )
    done = Message("assistant", [TextPart("It printed hi.")])
    p2 = renderer.render(conv2, history)
    o2 = renderer.encode_reply("It printed hi.", None, [], validate=False)
    retry = {"headers": {"x-stainless-retry-count": "1"}}
    calls = [
        _teacher_call(teacher.id, 0, conv1, p1.ids, ask, o1),
        _teacher_call(teacher.id, 1, conv1, p1.ids, ask, o1, harness=retry),  # SDK retry
        _teacher_call(teacher.id, 2, conv2, p2.ids, done, o2),
        _teacher_call(teacher.id, 3, conv2, p2.ids, done, [], status=CallStatus.ENGINE_ERROR),
    ]
    for c in calls:
        await store.record_call(c)
    await store.finish_rollout(teacher.id, RolloutStatus.COMPLETED, reward=1.0)
    # A policy rollout beside it, so that the RL exports have something to write.
    policy = await store.create_rollout(task_id="t9", group_id="g9")
    await store.record_call(
        CallRecord(
            id="policy-c0",
            rollout_id=policy.id,
            seq=0,
            dialect="openai_chat",
            status=CallStatus.OK,
            prompt_ids=p1.ids,
            output_ids=o1,
            output_logprobs=[-0.5] * len(o1),
            engine="local",
            conversation=calls[0].conversation,
            completion=calls[0].completion,
        )
    )
    await store.finish_rollout(policy.id, RolloutStatus.COMPLETED, reward=0.0)
    await store.close()
    assert p2.ids[: len(p1.ids) + len(o1)] == p1.ids + o1  # as the gateway renders it
    return {"teacher": teacher.id, "policy": policy.id, "calls": calls}


@pytest.fixture
def teacher_store(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "teacher.db"
    return path, asyncio.run(_build(path))


def _export(store: Path, out: Path, *args: str) -> str:
    result = runner.invoke(
        app, ["traces", "export", "--store", str(store), "--out", str(out), *args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_teacher_calls_in_sft_tokenized_form(
    teacher_store: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    store, built = teacher_store
    first, _, second, _ = built["calls"]
    out = tmp_path / "sft.jsonl"
    _export(store, out, "--format", "sft")
    chats = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    tokens = [orjson.loads(x) for x in (tmp_path / "sft.tokens.jsonl").read_bytes().splitlines()]
    # The retry collapses into one example; the failed call gives none; the policy rollout
    # had reward 0 and gives none either.
    assert [t["call_id"] for t in tokens] == [built["calls"][1].id, second.id]
    assert {t["source"] for t in tokens} == {"teacher"}
    assert len(chats) == 2
    for rec, call in zip(tokens, (first, second), strict=True):
        assert rec["rollout_id"] == built["teacher"]
        assert rec["input_ids"] == call.prompt_ids + call.output_ids
        assert rec["loss_mask"] == [0] * len(call.prompt_ids) + [1] * len(call.output_ids)
    assert chats[0]["messages"][-1]["tool_calls"][0]["function"]["name"] == "bash"
    assert chats[1]["messages"][-1] == {"role": "assistant", "content": "It printed hi."}
    assert chats[1]["messages"][-2]["role"] == "tool" and chats[1]["tools"]
    # Token-exact chain: the second record's ids begin with the first record's.
    assert tokens[1]["input_ids"][: len(tokens[0]["input_ids"])] == tokens[0]["input_ids"]


@pytest.mark.parametrize("mode", ["per_call", "merged"])
def test_teacher_calls_never_in_rl_exports(
    teacher_store: tuple[Path, dict[str, Any]], tmp_path: Path, mode: str
) -> None:
    store, built = teacher_store
    out = tmp_path / "rl.parquet"
    text = _export(store, out, "--format", "verl", "--mode", mode)
    assert "no_trainable_calls: 1" in text  # the teacher-only rollout
    rows = pq.read_table(out).to_pylist()
    assert [r["call_ids"] for r in rows] == [["policy-c0"]]
    assert [r["rollout_id"] for r in rows] == [built["policy"]]
    everything = tmp_path / "all.jsonl"
    _export(store, everything, "--format", "jsonl", "--mode", mode)
    recs = {r["rollout"]["id"]: r for r in map(orjson.loads, everything.read_bytes().splitlines())}
    teacher = recs[built["teacher"]]
    assert teacher["samples"] == [] and teacher["nodes"] == []
    # Retries collapse as for policy calls: the completed repeat and the later failure of a
    # completed prompt are dropped (2), the last completed call of each prompt kept.
    assert teacher["teacher_calls"] == [c.id for c in built["calls"][1:3]]
    assert teacher["counts"]["retries"] == 2 and teacher["counts"]["teacher_calls"] == 2
    assert teacher["counts"]["retry_headers"] == 1
