"""The teacher engine against a local OpenAI/Anthropic-shaped server; engine construction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from openforge.conversation import (
    Completion,
    Conversation,
    ImagePart,
    Message,
    SamplingParams,
    TextPart,
    ToolCall,
    ToolSpec,
)
from openforge.engines.base import Engine, EngineError, EngineOverloaded, TextEngine
from openforge.engines.registry import EngineConfig, create_engine
from openforge.engines.replicas import ReplicaSet
from openforge.engines.sglang import SGLangEngine
from openforge.engines.upstream import UpstreamEngine
from openforge.engines.vllm import VLLMEngine

from .fake_servers import Served


def upstream_app(seen: list[tuple[str, dict[str, Any], dict[str, str]]]) -> Starlette:
    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        seen.append((request.url.path, body, dict(request.headers)))
        if body["model"] == "busy":
            return JSONResponse({"error": {"message": "rate limited"}}, status_code=429)
        last = body["messages"][-1]
        if body.get("tools") and len(body["messages"]) <= 2:  # first turn: use a tool
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": f"echo: {last['content']}"}
            finish = "stop"
        return JSONResponse(
            {
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
            }
        )

    async def messages(request: Request) -> Response:
        body = orjson.loads(await request.body())
        seen.append((request.url.path, body, dict(request.headers)))
        if "max_tokens" not in body:
            return JSONResponse(
                {
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "max_tokens: Field required",
                    },
                },
                status_code=400,
            )
        return JSONResponse(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Paris."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "bash",
                        "input": {"command": "pwd"},
                    },
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 20, "output_tokens": 7},
            }
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
        ]
    )


def conversation(model: str = "teacher") -> Conversation:
    return Conversation(
        model=model,
        messages=[
            Message("system", [TextPart("Be brief.")]),
            Message("user", [TextPart("list files"), ImagePart("data:image/png;base64,AAAA")]),
            Message(
                "assistant",
                [TextPart("")],
                tool_calls=[ToolCall("c1", "bash", '{"command": "ls"}')],
            ),
            Message("tool", [TextPart("a.txt")], tool_call_id="c1"),
            Message("user", [TextPart("capital of France?")]),
        ],
        tools=[
            ToolSpec(
                "bash",
                "run a command",
                {"type": "object", "properties": {"command": {"type": "string"}}},
            )
        ],
        params=SamplingParams(max_tokens=50, temperature=0.3),
    )


async def one(engine: TextEngine, conv: Conversation) -> Completion:
    answers = [c async for c in engine.complete(conv)]
    assert len(answers) == 1
    return answers[0]


async def test_openai_compatible_teacher() -> None:
    seen: list[tuple[str, dict[str, Any], dict[str, str]]] = []
    async with Served(upstream_app(seen)) as served:
        engine = UpstreamEngine("openai", url=served.url + "/v1", api_key="sk-test")
        try:
            assert isinstance(engine, TextEngine) and engine.info().kind == "upstream"
            answer = await one(engine, conversation())
            assert answer.text == "echo: capital of France?" and answer.finish_reason == "stop"
            assert answer.usage.prompt_tokens == 11 and answer.output_ids == []
            _, body, headers = seen[-1]
            assert headers["authorization"] == "Bearer sk-test"
            assert [m["role"] for m in body["messages"]] == [
                "system",
                "user",
                "assistant",
                "tool",
                "user",
            ]
            assert body["messages"][1]["content"][1] == {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,AAAA"},
            }
            assert body["messages"][2]["tool_calls"][0]["function"]["name"] == "bash"
            assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
            assert body["tools"][0]["function"]["name"] == "bash"
            assert body["max_tokens"] == 50 and body["temperature"] == 0.3
            conv = conversation()
            conv.messages = conv.messages[:2]
            called = await one(engine, conv)
            assert called.finish_reason == "tool_calls"
            assert called.tool_calls == [ToolCall("call_1", "bash", '{"command": "ls"}')]
            with pytest.raises(EngineOverloaded, match="rate limited"):
                await one(engine, conversation("busy"))
        finally:
            await engine.close()


async def test_anthropic_compatible_teacher() -> None:
    seen: list[tuple[str, dict[str, Any], dict[str, str]]] = []
    async with Served(upstream_app(seen)) as served:
        engine = UpstreamEngine("anthropic", url=served.url, api_key="sk-ant")
        try:
            answer = await one(engine, conversation())
            assert answer.text == "Paris." and answer.reasoning == "hmm"
            assert answer.finish_reason == "tool_calls"
            assert answer.tool_calls[0].name == "bash"
            assert orjson.loads(answer.tool_calls[0].arguments) == {"command": "pwd"}
            _, body, headers = seen[-1]
            assert headers["x-api-key"] == "sk-ant" and headers["anthropic-version"]
            assert body["system"] == "Be brief." and body["max_tokens"] == 50
            assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
            assert body["messages"][0]["content"][1]["source"] == {
                "type": "base64",
                "media_type": "image/png",
                "data": "AAAA",
            }
            assert body["messages"][1]["content"] == [
                {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}
            ]
            assert body["messages"][2]["content"][0] == {
                "type": "tool_result",
                "tool_use_id": "c1",
                "content": "a.txt",
            }
            assert body["tools"][0]["input_schema"]["properties"]["command"]
        finally:
            await engine.close()


async def test_unreachable_upstream_is_an_engine_error() -> None:
    engine = UpstreamEngine("openai", url="http://127.0.0.1:9/v1", api_key="k")
    try:
        with pytest.raises(EngineError, match="unreachable"):
            await one(engine, conversation())
    finally:
        await engine.close()


async def test_create_engine_builds_each_kind(tmp_path: Path) -> None:
    from openforge.models.registry import resolve_model

    tiny = str(resolve_model("tiny"))
    local = create_engine("local", model="tiny", max_context=512)
    assert isinstance(local, Engine) and local.info().context_length == 512
    await local.close()
    one_url = create_engine(EngineConfig(kind="vllm", model=tiny, urls=["http://127.0.0.1:1"]))
    assert isinstance(one_url, VLLMEngine) and one_url.info().context_length == 8192
    await one_url.close()
    several = create_engine("sglang", urls=["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert isinstance(several, ReplicaSet) and isinstance(several.replicas[0], SGLangEngine)
    await several.close()
    teacher = create_engine("upstream", urls=["http://127.0.0.1:3/v1"], api="anthropic")
    assert isinstance(teacher, UpstreamEngine) and teacher.api == "anthropic"
    await teacher.close()
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "hi"}\n')
    scripted = create_engine("scripted", model=tiny, script=str(script))
    assert scripted.info().kind == "scripted"
    await scripted.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": "nope"}, "unknown engine"),
        ({"kind": "vllm"}, "--url"),
        ({"kind": "upstream", "api": "x"}, "--api"),
        ({"kind": "scripted"}, "--script"),
        ({"kind": "local"}, "--model"),
    ],
)
def test_bad_config_names_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(EngineError, match=message):
        EngineConfig(**options)
