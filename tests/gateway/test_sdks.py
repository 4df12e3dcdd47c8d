"""The official openai and anthropic SDKs against a real gateway: tools, streams, keys, errors."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from openforge.engines.scripted import scripted_logprob
from openforge.gateway.server import Gateway

from .conftest import anthropic_client, closing, new_rollout, openai_client, rollout_calls

TOOLS_OAI: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
TOOLS_ANT: list[Any] = [
    {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    }
]
# A real 1x1 PNG (the gateway decodes and checks every image it is sent).
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGM4wcUFAAJ6AN1nJ0J9AAAAAElFTkSuQmCC"


def _check_recorded(call: dict[str, Any]) -> None:
    assert call["status"] == "ok"
    assert call["output_logprobs"] == pytest.approx(
        [scripted_logprob(t, i) for i, t in enumerate(call["output_ids"])], abs=1e-6
    )


async def test_chat_tool_round_trip_path_key(gateway: Gateway) -> None:
    r = await new_rollout(gateway, task_id="t1")
    client = closing(openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="ignored"))
    msgs: list[Any] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image? Then run echo hi."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        }
    ]
    first = await client.chat.completions.create(model="gpt-5", messages=msgs, tools=TOOLS_OAI)
    assert first.model == "gpt-5"
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.id.startswith("call_") and call.function.name == "bash"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"command": "echo hi"}  # type: ignore[union-attr]
    msgs += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "hi\n"},
    ]
    stream = await client.chat.completions.create(
        model="gpt-5",
        messages=msgs,
        tools=TOOLS_OAI,
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    usage = None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert text == "The command printed hi."
    assert usage is not None and usage.completion_tokens > 0
    rec = await rollout_calls(gateway, r["rollout_id"])
    assert [c["dialect"] for c in rec["calls"]] == ["openai_chat", "openai_chat"]
    first_call, second = rec["calls"]
    for c in rec["calls"]:
        _check_recorded(c)
    # Token-exact: the second prompt extends the first prompt + its sampled output.
    prefix = first_call["prompt_ids"] + first_call["output_ids"]
    assert second["prompt_ids"][: len(prefix)] == prefix
    assert not second["fork"]
    assert first_call["harness"]["user-agent"].startswith("AsyncOpenAI/Python")


async def test_anthropic_stream_and_tools_bearer_key(gateway: Gateway) -> None:
    r = await new_rollout(gateway)
    client = closing(anthropic.AsyncAnthropic(base_url=gateway.url, api_key=r["key"]))
    msgs: list[Any] = [{"role": "user", "content": "run echo hi"}]
    async with client.messages.stream(
        model="claude-x", max_tokens=1024, messages=msgs, tools=TOOLS_ANT, system="Be brief."
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = final.content[-1]
    assert use.type == "tool_use" and use.id.startswith("toolu_")
    assert use.input == {"command": "echo hi"}
    msgs += [
        {"role": "assistant", "content": [b.model_dump() for b in final.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "hi\n"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        },
    ]
    done = await client.messages.create(
        model="claude-x", max_tokens=1024, messages=msgs, tools=TOOLS_ANT, system="Be brief."
    )
    assert done.content[0].type == "text" and done.content[0].text == "The command printed hi."
    counted = await client.messages.count_tokens(model="claude-x", messages=msgs, tools=TOOLS_ANT)
    assert counted.input_tokens > 0
    rec = await rollout_calls(gateway, r["rollout_id"])
    assert [c["dialect"] for c in rec["calls"]] == ["anthropic", "anthropic"]
    prefix = rec["calls"][0]["prompt_ids"] + rec["calls"][0]["output_ids"]
    assert rec["calls"][1]["prompt_ids"][: len(prefix)] == prefix


async def test_x_api_key_and_beta_query(gateway: Gateway) -> None:
    r = await new_rollout(gateway)
    client = closing(anthropic.AsyncAnthropic(base_url=gateway.url, api_key=r["key"]))
    msg = await client.beta.messages.create(
        model="claude-x",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        betas=["interleaved-thinking-2025-05-14"],
    )
    assert msg.stop_reason == "tool_use"
    rec = await rollout_calls(gateway, r["rollout_id"])
    assert rec["calls"][0]["harness"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_unknown_key_and_closed_rollout(gateway: Gateway) -> None:
    bad = closing(
        openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="not-a-key", max_retries=0)
    )
    with pytest.raises(openai.AuthenticationError):
        await bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    r = await new_rollout(gateway)
    import httpx

    async with httpx.AsyncClient(headers=gateway.admin_headers) as c:
        url = f"{gateway.admin_url}/rollouts/{r['rollout_id']}/finish"
        assert (await c.post(url, json={"status": "completed", "reward": 1.0})).status_code == 200
        assert (await c.post(url, json={"status": "completed", "reward": 1.0})).status_code == 200
        assert (await c.post(url, json={"status": "timeout"})).status_code == 409
    closed = anthropic_client(r)
    with pytest.raises(anthropic.PermissionDeniedError):
        await closed.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )


async def test_bad_requests_get_dialect_errors(gateway: Gateway) -> None:
    r = await new_rollout(gateway)
    client = openai_client(r)
    with pytest.raises(openai.BadRequestError) as oai:
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], n=2
        )
    assert oai.value.body["param"] == "n"  # type: ignore[index]
    ant = anthropic_client(r)
    with pytest.raises(anthropic.BadRequestError):
        await ant.messages.create(
            model="m",
            max_tokens=8,
            messages=[
                {
                    "role": "bogus",  # type: ignore[misc,list-item]
                    "content": "x",
                }
            ],
        )
    rec = await rollout_calls(gateway, r["rollout_id"])
    assert [c["status"] for c in rec["calls"]] == ["rejected", "rejected"]


async def test_context_too_long(make_gateway: Any) -> None:
    async with make_gateway(max_context=50) as gw:
        r = await new_rollout(gw)
        client = openai_client(r)
        with pytest.raises(openai.BadRequestError) as oai:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "word " * 100}]
            )
        assert oai.value.code == "context_length_exceeded"
        ant = anthropic_client(r)
        with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
            await ant.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "word " * 100}]
            )


async def test_anonymous(make_gateway: Any) -> None:
    async with make_gateway(allow_anonymous=True) as gw:
        client = closing(openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="whatever"))
        out = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
        assert out.choices[0].finish_reason == "tool_calls"
        models = await client.models.list()
        assert [m.id for m in models.data] == ["smollm2-135m"]
