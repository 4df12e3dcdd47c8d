"""Responses compaction through a real gateway with the official ``openai`` SDK: the
policy (scripted) writes the summary in a recorded call of its own, it comes back as a
``compaction`` item (``responses.compact``, and a ``compaction_trigger`` streamed and
not), the item goes back in later input as the summary, and that call is a fork whose
reason names the compaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from openforge.dialects.openai_responses.compaction import INSTRUCTION, decode_content
from openforge.gateway.server import Gateway
from openforge.rendering import load_tokenizer
from openforge.traces.graph import build_graph
from openforge.traces.view import load_decoder, render_html

from .conftest import MODEL, new_rollout, openai_client, rollout_calls

SUMMARY = "Goal: print forge-42. Done: ran echo, it printed forge-42. Next: report it."
TOOL: Any = {
    "type": "function",
    "name": "bash",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}
SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo forge-42"}}]},
    {"text": SUMMARY},
    {"text": "The answer is forge-42."},
]


async def _first_turn(client: openai.AsyncOpenAI) -> list[Any]:
    """The task and the policy's tool call with its output, as a harness holds them."""
    items: list[Any] = [
        {"role": "developer", "content": "You are a careful agent."},
        {"role": "user", "content": "Print forge-42."},
    ]
    first = await client.responses.create(model="m", input=items, tools=[TOOL])
    call = first.output[-1]
    assert call.type == "function_call"
    return [
        *items,
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "forge-42"},
    ]


def _check_trace(calls: list[dict[str, Any]], source: str) -> None:
    """The compaction call extends the first exactly and is marked; the call carrying its
    summary forks, with the compaction as its reason."""
    first, compaction, after = calls
    assert [c["status"] for c in calls] == ["ok", "ok", "ok"]
    assert compaction["render_info"]["compaction"] in ("compaction_trigger", "responses/compact")
    prefix = first["prompt_ids"] + first["output_ids"]
    assert compaction["prompt_ids"][: len(prefix)] == prefix and not compaction["fork"]
    tok = load_tokenizer(MODEL)
    assert INSTRUCTION in tok.decode(compaction["prompt_ids"])
    assert tok.decode(compaction["output_ids"]).startswith(SUMMARY)
    assert after["fork"]
    reason = after["render_info"]["fork_reason"]
    assert reason.startswith("compacted: message ") and source in reason
    assert after["render_info"]["compacted"][0]["source"] == source
    shown = tok.decode(after["prompt_ids"])
    assert SUMMARY in shown and "echo forge-42" not in shown and INSTRUCTION not in shown


async def test_compact_endpoint_round_trip(make_gateway: Callable[..., Gateway]) -> None:
    async with make_gateway(SCRIPT) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        items = await _first_turn(client)
        compacted = await client.responses.compact(
            model="m", input=items, extra_body={"tools": [TOOL]}
        )
        assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
        kinds = [(o.type, getattr(o, "role", None)) for o in compacted.output]
        assert kinds == [("message", "user"), ("compaction", None)]
        item = compacted.output[-1]
        assert item.type == "compaction" and item.id.startswith("cmp_")
        assert decode_content(item.encrypted_content, "x") == (SUMMARY, compacted.id)
        assert compacted.usage.output_tokens > 0
        # The compacted window: the developer turn, then what compact returned (the SDK
        # types a user message in it as an output message, hence no serializer warnings).
        out = [o.model_dump(exclude_none=True, warnings=False) for o in compacted.output]
        assert out[0]["content"] == [{"type": "input_text", "text": "Print forge-42."}]
        window = [items[0], *out]
        last = await client.responses.create(model="m", input=window, tools=[TOOL])
        assert last.output_text == "The answer is forge-42."
        rec = await rollout_calls(gw, r["rollout_id"])
    _check_trace(rec["calls"], compacted.id)


@pytest.mark.parametrize("stream", [False, True])
async def test_compaction_trigger_round_trip(
    make_gateway: Callable[..., Gateway], stream: bool
) -> None:
    async with make_gateway(SCRIPT) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        items = await _first_turn(client)
        trigger = [*items, {"type": "compaction_trigger"}]
        if stream:
            async with client.responses.stream(model="m", input=trigger, tools=[TOOL]) as s:
                kinds = [event.type async for event in s]
                response = await s.get_final_response()
            assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
            assert "response.compaction.compacting" in kinds
            assert "response.output_text.delta" not in kinds
        else:
            response = await client.responses.create(model="m", input=trigger, tools=[TOOL])
        assert [o.type for o in response.output] == ["compaction"]
        item = response.output[0]
        assert item.type == "compaction"
        assert decode_content(item.encrypted_content, "x") == (SUMMARY, response.id)
        # What Codex sends next: its kept turns, then the item as it got it.
        window = [*items[:2], item.model_dump(exclude_none=True)]
        last = await client.responses.create(model="m", input=window, tools=[TOOL])
        assert last.output_text == "The answer is forge-42."
        rec = await rollout_calls(gw, r["rollout_id"])
        stored = await gw.store.calls(r["rollout_id"])
        rollout = await gw.store.get_rollout(r["rollout_id"])
    _check_trace(rec["calls"], response.id)
    # The trace: two paths, the second a fork whose reason is the compaction.
    graph = build_graph(stored)
    assert graph.forks == 1 and [len(p) for p in graph.paths()] == [2, 1]
    html = render_html(rollout, graph, load_decoder(None, MODEL))
    assert (
        "#1 (compaction)" in html
        and f"compacted: message 2 is the summary of compaction {response.id}" in html
    )


async def test_compaction_continued_by_previous_response_id(
    make_gateway: Callable[..., Gateway],
) -> None:
    async with make_gateway(SCRIPT) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        items = await _first_turn(client)
        trigger = [*items, {"type": "compaction_trigger"}]
        response = await client.responses.create(model="m", input=trigger, tools=[TOOL], store=True)
        # Continuing the compaction continues its summary, not the turns it replaced.
        gw.apps.service.dialects[1].memory._recent.clear()  # type: ignore[attr-defined]
        last = await client.responses.create(
            model="m", previous_response_id=response.id, input="Go on.", tools=[TOOL]
        )
        assert last.output_text == "The answer is forge-42."
        rec = await rollout_calls(gw, r["rollout_id"])
    after = rec["calls"][-1]
    assert after["fork"] and response.id in after["render_info"]["fork_reason"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": [{"type": "compaction", "encrypted_content": "gAAAAB-openai-sealed"}]},
            "input[0].encrypted_content",
        ),
        (
            {"input": [{"type": "compaction_trigger"}, {"role": "user", "content": "hi"}]},
            "input[0]",
        ),
        (
            {"input": [{"type": "compaction_trigger", "extra": 1}, {"type": "nope"}]},
            "input[1].type",
        ),
    ],
)
async def test_compaction_refusals(gateway: Gateway, body: dict[str, Any], param: str) -> None:
    r = await new_rollout(gateway)
    client = openai_client(r)
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="m", **body)
    assert err.value.body["param"] == param  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.compact(model="m", input="")
    assert err.value.body["param"] == "input"  # type: ignore[index]
