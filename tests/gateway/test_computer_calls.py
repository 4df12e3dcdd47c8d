"""Responses computer use through a real gateway with the official ``openai`` SDK: the
``computer_use_preview`` tool reaches the prompt, the scripted policy's actions come back
as ``computer_call`` items (streamed and not), screenshots go back in as
``computer_call_output`` images stored once, and each call extends the last exactly."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from typing import Any

import openai
import pytest

from openforge.gateway.server import Gateway
from openforge.rendering import load_tokenizer

from .conftest import MODEL, new_rollout, openai_client, rollout_calls
from .test_vendor_tools import screenshot

COMPUTER: Any = {
    "type": "computer_use_preview",
    "display_width": 1024,
    "display_height": 768,
    "environment": "linux",
}
CLICK = {"type": "click", "button": "left", "x": 100, "y": 200}
DRAG = {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 30, "y": 40}]}
KEYS = {"type": "keypress", "keys": ["CTRL", "L"]}


def _output(call_id: str, seed: int) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(screenshot(seed)).decode()
    return {
        "type": "computer_call_output",
        "call_id": call_id,
        "output": {"type": "computer_screenshot", "image_url": url},
        "acknowledged_safety_checks": [],
    }


def _script(*actions: dict[str, Any]) -> list[dict[str, Any]]:
    calls = [{"tool_calls": [{"name": "computer", "arguments": a}]} for a in actions]
    return [*calls, {"text": "The page is open."}]


async def test_computer_calls_round_trip(make_gateway: Callable[..., Gateway]) -> None:
    async with make_gateway(_script(CLICK, DRAG, KEYS)) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        items: list[Any] = [{"role": "user", "content": "Open the page."}]
        first = await client.responses.create(
            model="computer-use-preview", input=items, tools=[COMPUTER], truncation="auto"
        )
        call = first.output[-1]
        assert call.type == "computer_call" and call.status == "completed"
        assert call.call_id.startswith("call_") and call.id.startswith("cu_")
        assert call.pending_safety_checks == []
        assert call.action is not None and call.action.type == "click"
        assert call.action.model_dump(exclude_none=True) == CLICK
        assert first.tools[0].type == "computer_use_preview"
        # Sent back as a harness dumps it: the SDK adds "keys": null, never sampled.
        items += [call.model_dump(), _output(call.call_id, 1)]
        async with client.responses.stream(
            model="computer-use-preview", input=items, tools=[COMPUTER], truncation="auto"
        ) as stream:
            kinds = [event.type async for event in stream]
            second = await stream.get_final_response()
        assert kinds[-3:] == [
            "response.output_item.added",
            "response.output_item.done",
            "response.completed",
        ]
        call2 = second.output[-1]
        assert call2.type == "computer_call" and call2.action is not None
        assert call2.action.model_dump(exclude_none=True) == DRAG
        # Sent back as the SDK's own objects this time, with a raw SSE stream.
        items += [*second.output, _output(call2.call_id, 2)]
        stream3 = await client.responses.create(
            model="computer-use-preview",
            input=items,
            tools=[COMPUTER],
            stream=True,
        )
        done_items = [e.item async for e in stream3 if e.type == "response.output_item.done"]
        assert [i.type for i in done_items] == ["computer_call"]
        assert done_items[0].action.model_dump(exclude_none=True) == KEYS  # type: ignore[union-attr]
        items += [done_items[0].model_dump(exclude_none=True), _output(done_items[0].call_id, 3)]  # type: ignore[union-attr]
        last = await client.responses.create(
            model="computer-use-preview", input=items, tools=[COMPUTER]
        )
        assert last.output_text == "The page is open."
        rec = await rollout_calls(gw, r["rollout_id"])
        shots = sum(len(screenshot(s)) for s in (1, 2, 3))
        assert await gw.store.blob_bytes() == shots  # type: ignore[attr-defined]
    calls = rec["calls"]
    assert len(calls) == 4
    prompt = load_tokenizer(MODEL).decode(calls[0]["prompt_ids"])
    assert '"name": "computer"' in prompt and "1024x768" in prompt and '"scroll_y"' in prompt
    for before, after in itertools.pairwise(calls):
        assert after["status"] == "ok" and not after["fork"]
        prefix = before["prompt_ids"] + before["output_ids"]
        assert after["prompt_ids"][: len(prefix)] == prefix


async def test_computer_call_with_previous_response_id(
    make_gateway: Callable[..., Gateway],
) -> None:
    async with make_gateway(_script({"type": "screenshot"})) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        first = await client.responses.create(
            model="m",
            input="Look at the screen.",
            tools=[COMPUTER],
            tool_choice={"type": "computer_use_preview"},
            store=True,
        )
        call = first.output[-1]
        assert call.type == "computer_call" and call.action is not None
        assert call.action.type == "screenshot"
        nxt = await client.responses.create(
            model="m",
            previous_response_id=first.id,
            input=[_output(call.call_id, 7)],
            tools=[COMPUTER],
        )
        assert nxt.output_text == "The page is open."
        rec = await rollout_calls(gw, r["rollout_id"])
        forced = load_tokenizer(MODEL).decode(rec["calls"][0]["prompt_ids"])
        assert "You must call the function computer" in forced
        stored = await gw.store.calls(r["rollout_id"])
        shot = stored[1].conversation["messages"][-1]
        assert shot["role"] == "tool" and shot["content"][0]["type"] == "image"
        assert shot["content"][0]["url"].startswith("sha256:")
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(
                model="m", input=[_output("call_nobody", 8)], tools=[COMPUTER]
            )
        assert err.value.body["param"] == "input[0].call_id"  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": "x", "tools": [{"type": "computer_use_preview", "display_width": 8}]},
            "tools[0].display_height",
        ),
        (
            {
                "input": "x",
                "tools": [
                    COMPUTER,
                    {"type": "function", "name": "computer", "parameters": {"type": "object"}},
                ],
            },
            "tools[1].name",
        ),
        (
            {
                "input": [
                    {"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}},
                    {
                        "type": "computer_call_output",
                        "call_id": "c1",
                        "output": {"type": "computer_screenshot", "file_id": "file_1"},
                    },
                ],
                "tools": [COMPUTER],
            },
            "input[1].output.image_url",
        ),
        (
            {"input": [{"type": "computer_call", "call_id": "c1"}], "tools": [COMPUTER]},
            "input[0].action",
        ),
        ({"input": "x", "tools": [COMPUTER, {"type": "computer"}]}, "tools[1]"),
    ],
)
async def test_computer_refusals(gateway: Gateway, body: dict[str, Any], param: str) -> None:
    r = await new_rollout(gateway)
    client = openai_client(r)
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="m", **body)
    assert err.value.body["param"] == param  # type: ignore[index]


async def test_batched_computer_tool(make_gateway: Callable[..., Gateway]) -> None:
    batch = {"actions": [CLICK, {"type": "type", "text": "hello"}, KEYS]}
    script = [{"tool_calls": [{"name": "computer", "arguments": batch}]}, {"text": "Typed."}]
    async with make_gateway(script) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        items: list[Any] = [{"role": "user", "content": "Type hello."}]
        async with client.responses.stream(
            model="gpt-5.5", input=items, tools=[{"type": "computer"}]
        ) as stream:
            first = await stream.get_final_response()
        call = first.output[-1]
        assert call.type == "computer_call" and call.action is None
        assert [a.model_dump(exclude_none=True) for a in call.actions or []] == batch["actions"]
        assert first.tools[0].type == "computer"
        items += [call.model_dump(), _output(call.call_id, 11)]
        done = await client.responses.create(
            model="gpt-5.5", input=items, tools=[{"type": "computer"}]
        )
        assert done.output_text == "Typed."
        rec = await rollout_calls(gw, r["rollout_id"])
    prompt = load_tokenizer(MODEL).decode(rec["calls"][0]["prompt_ids"])
    assert '"actions"' in prompt and '"keypress"' in prompt
    first_call, second = rec["calls"]
    assert second["status"] == "ok" and not second["fork"]
    prefix = first_call["prompt_ids"] + first_call["output_ids"]
    assert second["prompt_ids"][: len(prefix)] == prefix
