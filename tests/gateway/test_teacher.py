"""Teacher calls: `openforge gateway --engine upstream` in front of a local fake upstream.

The upstream is a real OpenAI-compatible server (Starlette on 127.0.0.1) that answers
from a queue and keeps the requests it got; the harnesses are the official SDKs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Generator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from openforge.gateway.records import conversation_from_json
from openforge.gateway.server import GatewayProcess, bind_socket
from openforge.rendering.renderer import Renderer
from openforge.rendering.tokenizer import load_tokenizer
from openforge.store.sqlite import SqliteStore

from .conftest import MODEL

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def _answer(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 0,
        "model": "teacher-1",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


class FakeUpstream:
    """An OpenAI-compatible chat server answering with a tool call, then with text."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        last = body["messages"][-1]
        if "fail" in str(last.get("content")):
            return JSONResponse({"error": {"message": "upstream exploded"}}, status_code=500)
        if last["role"] == "tool":
            return JSONResponse(
                _answer({"role": "assistant", "content": f"It printed {last['content']}"}, "stop")
            )
        call = {
            "id": "call_upstream_1",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "echo hi"}'},
        }
        message = {"role": "assistant", "content": "Let me run it.", "tool_calls": [call]}
        return JSONResponse(_answer(message, "tool_calls"))

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])
        sock = bind_socket("127.0.0.1", 0)
        server = _Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        import asyncio

        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        finally:
            server.should_exit = True
            await task
            sock.close()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer(load_tokenizer(MODEL))


async def _calls(admin_url: str, rollout_id: str, token: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as c:
        r = await c.get(f"{admin_url}/rollouts/{rollout_id}", params={"tokens": 1})
        return list(r.json()["calls"])


@pytest.mark.slow
async def test_teacher_calls_through_the_gateway(tmp_path: Path, renderer: Renderer) -> None:
    upstream = FakeUpstream()
    store_path = tmp_path / "store.db"
    async with upstream.serve() as up_url:
        args = ["--engine", "upstream", "--api", "openai", "--url", up_url, "--model", MODEL]
        proc = await GatewayProcess.start(
            [*args, "--served-model", "teacher-1", "--store", str(store_path)],
            env={"OPENAI_API_KEY": "sk-upstream"},
        )
        try:
            async with httpx.AsyncClient(headers=proc.admin_headers) as c:
                ro = (await c.post(proc.admin_url + "/rollouts", json={})).json()
                ant = (await c.post(proc.admin_url + "/rollouts", json={})).json()
            client = openai.AsyncOpenAI(base_url=ro["openai_base_url"], api_key="x", max_retries=0)
            async with client:
                msgs: list[Any] = [{"role": "user", "content": "Run echo hi."}]
                first = await client.chat.completions.create(
                    model="gpt-5", messages=msgs, tools=TOOLS
                )
                choice = first.choices[0]
                assert choice.finish_reason == "tool_calls" and first.model == "gpt-5"
                assert choice.message.content == "Let me run it."
                tc = choice.message.tool_calls[0]  # type: ignore[index]
                assert tc.id.startswith("call_") and tc.id != "call_upstream_1"
                assert json.loads(tc.function.arguments) == {"command": "echo hi"}  # type: ignore[union-attr]
                msgs += [
                    choice.message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": tc.id, "content": "hi"},
                ]
                stream = await client.chat.completions.create(
                    model="gpt-5", messages=msgs, tools=TOOLS, stream=True
                )
                text = "".join(
                    [ch.choices[0].delta.content or "" async for ch in stream if ch.choices]
                )
                assert text == "It printed hi"
                with pytest.raises(openai.InternalServerError) as failed:
                    await client.chat.completions.create(
                        model="gpt-5", messages=[{"role": "user", "content": "fail"}]
                    )
                assert failed.value.status_code == 503
            async with anthropic.AsyncAnthropic(base_url=proc.url, api_key=ant["key"]) as aclient:
                async with aclient.messages.stream(
                    model="claude-x",
                    max_tokens=100,
                    messages=[{"role": "user", "content": "Run echo hi."}],
                    tools=[{"name": "bash", "input_schema": {"type": "object"}}],
                ) as s:
                    final = await s.get_final_message()
                assert final.stop_reason == "tool_use"
                assert [b.type for b in final.content] == ["text", "tool_use"]
                assert final.content[1].id.startswith("toolu_")  # type: ignore[union-attr]
            calls = await _calls(proc.admin_url, ro["rollout_id"], proc.admin_token)
        finally:
            await proc.stop()

    # What the upstream got: the conversation as text, asked for the served model.
    assert [r["model"] for r in upstream.requests] == ["teacher-1"] * 4
    assert upstream.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": tc.id,
        "content": "hi",
    }
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "bash"

    # What was recorded: teacher calls with our rendering's ids and no logprobs.
    assert [(c["status"], c["engine"]) for c in calls] == [
        ("ok", "upstream"),
        ("ok", "upstream"),
        ("engine_error", "upstream"),
    ]
    store = SqliteStore(store_path)
    records = await store.calls(ro["rollout_id"])
    await store.close()
    for rec in records[:2]:
        assert rec.output_logprobs == []
        conv = conversation_from_json(rec.conversation)
        assert rec.prompt_ids == renderer.render(conv).ids
        answer = rec.completion
        from openforge.gateway.records import answer_message

        msg = answer_message(answer)
        assert rec.output_ids == renderer.encode_reply(msg.text, msg.reasoning, msg.tool_calls)
    assert records[0].completion["tool_calls"][0]["id"] == tc.id
    assert records[1].completion["text"] == "It printed hi"
    # The teacher's turn is rendered from its recorded ids: the second prompt extends the first.
    prefix = records[0].prompt_ids + records[0].output_ids
    assert records[1].prompt_ids[: len(prefix)] == prefix and not records[1].fork
