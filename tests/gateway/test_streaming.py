"""Stream writes: ids that arrive together go out as one event; ids that trickle in, one by one."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from openforge.conversation import ReasoningDelta, TextDelta, ToolCallArgumentsDelta, ToolCallStart
from openforge.gateway.streaming import coalesce

from .conftest import new_rollout

CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True}
ANSWER = "one two three four five six seven eight nine ten"


def test_coalesce_merges_only_neighbours_of_one_kind() -> None:
    deltas: list[Any] = [
        ReasoningDelta("a"),
        ReasoningDelta("b"),
        TextDelta("c"),
        TextDelta("d"),
        ToolCallStart(0, "call_1", "bash"),
        ToolCallArgumentsDelta(0, '{"x"'),
        ToolCallArgumentsDelta(0, ": 1}"),
        ToolCallStart(1, "call_2", "bash"),
        ToolCallArgumentsDelta(1, "{}"),
    ]
    assert coalesce(deltas) == [
        ReasoningDelta("ab"),
        TextDelta("cd"),
        ToolCallStart(0, "call_1", "bash"),
        ToolCallArgumentsDelta(0, '{"x": 1}'),
        ToolCallStart(1, "call_2", "bash"),
        ToolCallArgumentsDelta(1, "{}"),
    ]
    assert deltas[0] == ReasoningDelta("a")  # inputs are not mutated


async def _content_events(gw: Any) -> list[str]:
    r = await new_rollout(gw)
    async with httpx.AsyncClient() as c:
        resp = await c.post(r["openai_base_url"] + "/chat/completions", json=CHAT)
    assert resp.status_code == 200
    events = [line[6:] for line in resp.text.split("\n") if line.startswith("data: {")]
    chunks = [orjson.loads(e) for e in events]
    return [
        ch["choices"][0]["delta"]["content"]
        for ch in chunks
        if ch["choices"] and ch["choices"][0]["delta"].get("content")
    ]


async def test_tokens_ready_together_go_out_as_one_event(make_gateway: Any) -> None:
    async with make_gateway([{"text": ANSWER}]) as gw:
        assert await _content_events(gw) == [ANSWER]


async def test_tokens_that_trickle_in_are_streamed_as_they_come(make_gateway: Any) -> None:
    async with make_gateway([{"text": ANSWER}], delay_s=0.005) as gw:
        pieces = await _content_events(gw)
    assert "".join(pieces) == ANSWER
    assert len(pieces) > 3  # not held back until the end
