"""Token-exactness over a 20-turn tool conversation, and Responses ``previous_response_id``."""

from __future__ import annotations

import itertools
import json
from typing import Any

import openai

from .conftest import new_rollout, rollout_calls

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
TURNS = 20
SCRIPT: list[dict[str, Any]] = [
    {
        "reasoning": f"Step {i}: look at file {i}.",
        "text": f"Checking {i}." if i % 3 else "",
        "tool_calls": [{"name": "bash", "arguments": {"command": f"cat f{i}.txt | wc -l"}}],
    }
    for i in range(TURNS - 1)
] + [{"text": "Done: all files counted ✓."}]


async def test_twenty_turn_replay_is_token_exact(make_gateway: Any) -> None:
    async with make_gateway(SCRIPT) as gw:
        r = await new_rollout(gw)
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            msgs: list[Any] = [{"role": "user", "content": "Count the lines of every file."}]
            for turn in range(TURNS):
                out = await client.chat.completions.create(
                    model="m", messages=msgs, tools=TOOLS, stream=turn % 2 == 1
                )
                if turn % 2 == 1:
                    text, calls, reasoning = "", {}, ""
                    async for chunk in out:  # type: ignore[union-attr]
                        delta = chunk.choices[0].delta if chunk.choices else None
                        if delta is None:
                            continue
                        text += delta.content or ""
                        reasoning += getattr(delta, "reasoning_content", None) or ""
                        for tc in delta.tool_calls or []:
                            slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                            slot["id"] = tc.id or slot["id"]
                            if tc.function:
                                slot["name"] += tc.function.name or ""
                                slot["args"] += tc.function.arguments or ""
                    message: dict[str, Any] = {"role": "assistant", "content": text or None}
                    if reasoning:
                        message["reasoning_content"] = reasoning
                    if calls:
                        message["tool_calls"] = [
                            {
                                "id": c["id"],
                                "type": "function",
                                "function": {"name": c["name"], "arguments": c["args"]},
                            }
                            for c in calls.values()
                        ]
                else:
                    message = out.choices[0].message.model_dump(exclude_none=True)  # type: ignore[union-attr]
                msgs.append(message)
                for tc in message.get("tool_calls", []):
                    cmd = json.loads(tc["function"]["arguments"])["command"]
                    msgs.append(
                        {"role": "tool", "tool_call_id": tc["id"], "content": f"{len(cmd)} {cmd}\n"}
                    )
                if not message.get("tool_calls"):
                    msgs.append({"role": "user", "content": "Thanks."})
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
    assert len(calls) == TURNS
    assert all(c["status"] == "ok" for c in calls)
    for prev, cur in itertools.pairwise(calls):
        path = prev["prompt_ids"] + prev["output_ids"]
        assert cur["prompt_ids"][: len(path)] == path, f"call {cur['seq']} re-tokenized history"
        assert not cur["fork"]
    # Every earlier assistant turn appears in the last prompt exactly as sampled.
    last = calls[-1]["prompt_ids"]
    for c in calls[:-1]:
        start = len(c["prompt_ids"])
        assert last[start : start + len(c["output_ids"])] == c["output_ids"]


async def test_responses_previous_response_id(make_gateway: Any) -> None:
    async with make_gateway() as gw:
        r = await new_rollout(gw)
        async with openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x") as client:
            tools: list[Any] = [
                {
                    "type": "function",
                    "name": "bash",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
                }
            ]
            first = await client.responses.create(
                model="gpt-5",
                input="run echo hi",
                tools=tools,
                store=True,
                instructions="You are terse.",
            )
            call = next(o for o in first.output if o.type == "function_call")
            assert call.call_id.startswith("call_")
            async with client.responses.stream(
                model="gpt-5",
                previous_response_id=first.id,
                input=[{"type": "function_call_output", "call_id": call.call_id, "output": "hi\n"}],
                tools=tools,
                instructions="You are terse.",
            ) as stream:
                final = await stream.get_final_response()
            assert final.output_text == "The command printed hi."
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
    path = calls[0]["prompt_ids"] + calls[0]["output_ids"]
    assert calls[1]["prompt_ids"][: len(path)] == path
