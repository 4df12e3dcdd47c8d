"""The token-exactness oracle: for a model whose own chat template renders tools, the
prompt ids OpenForge renders for a conversation (system, tools, parallel tool calls, tool
results, several turns), sent in the OpenAI or the Anthropic dialect, are the ids vLLM
renders itself for the same messages on ``/v1/chat/completions`` (``return_token_ids``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.rendering import load_tokenizer

from .test_vllm_gateway import gateway, new_rollout, recorded_calls
from .vllm_server import SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
    },
}
SEARCH = {
    "name": "search",
    "description": "Search the web; returns the top results' titles.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
}


def _call(id_: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip


# Turn by turn: a system prompt, two parallel calls and their results, an answer, a
# follow-up with one more call and result, and non-ASCII text on the way.
OPENAI_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel assistant. Use the tools when useful."},
    {"role": "user", "content": "Weather in Paris and in Zürich? Also find museums."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            _call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            _call("call_2", "get_weather", {"city": "Zürich"}),
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18, "sky": "cloudy"}'},
    {"role": "tool", "tool_call_id": "call_2", "content": '{"temp": 12, "sky": "rain"}'},
    {"role": "assistant", "content": "Paris: 18 °C, cloudy. Zürich: 12 °C, rain."},
    {"role": "user", "content": "Thanks! Now the museums, please."},
    {
        "role": "assistant",
        "content": "Searching.",
        "tool_calls": [_call("call_3", "search", {"query": "museums Paris", "limit": 3})],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "Louvre\nOrsay\nPompidou"},
]
OPENAI_TOOLS = [{"type": "function", "function": f} for f in (WEATHER, SEARCH)]


def _anthropic_body() -> dict[str, Any]:
    """The same conversation as Anthropic Messages (results of one turn in one message)."""

    def use(id_: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": id_, "name": name, "input": args}

    def result(id_: str, text: str) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": id_, "content": text}

    m = OPENAI_MESSAGES
    messages = [
        {"role": "user", "content": m[1]["content"]},
        {"role": "assistant", "content": [
            use("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
            use("call_2", "get_weather", {"city": "Zürich"}),
        ]},
        {"role": "user", "content": [result("call_1", m[3]["content"]),
                                     result("call_2", m[4]["content"])]},
        {"role": "assistant", "content": m[5]["content"]},
        {"role": "user", "content": m[6]["content"]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            use("call_3", "search", {"query": "museums Paris", "limit": 3}),
        ]},
        {"role": "user", "content": [result("call_3", m[8]["content"])]},
    ]  # fmt: skip
    tools = [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in (WEATHER, SEARCH)
    ]
    return {"model": "m", "system": m[0]["content"], "messages": messages, "tools": tools,
            "max_tokens": 1}  # fmt: skip


async def vllm_prompt_ids(server: VLLMServer, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt ids vLLM renders itself for ``messages`` with the tools.

    ``tool_choice: none``: "auto" needs a tool-call parser on the server, and SmolLM2's
    vocabulary has no ``<tool_call>`` token for vLLM's Hermes parser; with "none" vLLM
    still renders the tools (``--exclude-tools-when-tool-choice-none`` is off)."""
    async with httpx.AsyncClient(timeout=120) as client:
        got = await client.post(
            server.url + "/v1/chat/completions",
            json={"model": SERVED, "messages": messages, "tools": OPENAI_TOOLS,
                  "tool_choice": "none", "max_tokens": 1, "return_token_ids": True},
        )  # fmt: skip
    assert got.status_code == 200, got.text
    ids: list[int] = got.json()["prompt_token_ids"]
    return ids


async def test_prompt_ids_for_a_tool_conversation_are_the_ones_vllm_renders(
    live_vllm: VLLMServer, tool_model: Path, tmp_path: Path
) -> None:
    # Each prefix that ends where a model would be asked: after a user turn or tool results.
    cuts = [2, 5, 7, len(OPENAI_MESSAGES)]
    tok = load_tokenizer(tool_model)
    assert tok.template_handles_tools  # OpenForge renders through the model's template
    async with gateway(live_vllm, tool_model, tmp_path / "store.db") as gw:
        ours: list[list[int]] = []
        async with httpx.AsyncClient(timeout=120) as client:
            for cut in cuts:  # a rollout each: rendered from the messages, as vLLM does
                rollout = await new_rollout(gw)
                got = await client.post(
                    rollout["openai_base_url"] + "/chat/completions",
                    json={"model": "m", "messages": OPENAI_MESSAGES[:cut], "tools": OPENAI_TOOLS,
                          "max_tokens": 1},
                )  # fmt: skip
                assert got.status_code == 200, got.text
                (call,) = await recorded_calls(gw, rollout["rollout_id"])
                ours.append(call["prompt_ids"])
            rollout = await new_rollout(gw)
            got = await client.post(rollout["anthropic_base_url"] + "/v1/messages",
                                    json=_anthropic_body())  # fmt: skip
            assert got.status_code == 200, got.text
            (anthropic_call,) = await recorded_calls(gw, rollout["rollout_id"])
    for cut, prompt in zip(cuts, ours, strict=True):
        theirs = await vllm_prompt_ids(live_vllm, OPENAI_MESSAGES[:cut])
        assert prompt == theirs, (
            f"after {cut} messages:\nOpenForge: {tok.decode(prompt)!r}\nvLLM:      "
            f"{tok.decode(theirs)!r}"
        )
    assert anthropic_call["prompt_ids"] == ours[-1]
    text = tok.decode(ours[-1])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}' in text
    assert "<tool_response>\nLouvre\nOrsay\nPompidou\n</tool_response>" in text
