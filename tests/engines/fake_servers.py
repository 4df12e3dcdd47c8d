"""Local stand-ins for vLLM and SGLang (which need a GPU) speaking their documented shapes.

vLLM: ``POST /v1/completions`` streamed as OpenAI completion chunks with vLLM's
``token_ids`` extension and ``logprobs.token_logprobs``; ``/health``, ``/pause``,
``/resume``, ``/collective_rpc``, ``/reset_prefix_cache``. SGLang: ``POST /generate``
streamed with ``output_ids`` and ``meta_info`` (cumulative by default, incremental when
the server runs with ``--incremental-streaming-output``); ``/health``,
``/update_weights_from_disk``, ``/pause_generation``, ``/continue_generation``.

The "model" is arithmetic: token ``i`` of a prompt is ``fake_token(prompt, i)`` with
logprob ``fake_logprob(token)``, and its text is ``f"t{token} "``, so tests can predict
every field. ``FakeState.die_after`` makes the server drop the connection mid-stream.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def fake_token(prompt: list[int], i: int) -> int:
    return (sum(prompt) * 31 + i * 17) % 5000 + 10


def fake_logprob(token: int) -> float:
    return -(token % 100) / 50.0


@dataclass
class FakeState:
    requests: list[dict[str, Any]] = field(default_factory=list)
    admin: list[tuple[str, Any]] = field(default_factory=list)
    die_after: int | None = None  # drop the connection after this many tokens
    incremental: bool = False  # SGLang --incremental-streaming-output
    paused: bool = False
    weight_version: str = "0"


def _finish(
    prompt: list[int],
    i: int,
    text: str,
    token: int,
    max_tokens: int,
    stops: list[str],
    stop_ids: list[int],
) -> tuple[str, Any] | None:
    if token in stop_ids:
        return "stop", token
    for stop in stops:
        if stop in text:
            return "stop", stop
    if i + 1 >= max_tokens:
        return "length", None
    return None


def vllm_app(state: FakeState) -> Starlette:
    async def completions(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.requests.append(body)
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return JSONResponse({"error": {"message": "bad prompt"}}, status_code=400)

        async def events() -> AsyncIterator[bytes]:
            text = ""
            for i in range(body.get("max_tokens", 16)):
                if state.die_after is not None and i >= state.die_after:
                    raise ConnectionResetError("replica died")
                token = fake_token(prompt, i)
                text += f"t{token} "
                done = _finish(
                    prompt,
                    i,
                    text,
                    token,
                    body.get("max_tokens", 16),
                    body.get("stop") or [],
                    body.get("stop_token_ids") or [],
                )
                choice: dict[str, Any] = {
                    "index": 0,
                    "text": f"t{token} ",
                    "logprobs": {
                        "text_offset": [0],
                        "token_logprobs": [fake_logprob(token)],
                        "tokens": [f"t{token} "],
                        "top_logprobs": [{}],
                    },
                    "finish_reason": done[0] if done else None,
                    "stop_reason": done[1] if done else None,
                    "token_ids": [token],
                }
                if i == 0:
                    choice["prompt_token_ids"] = prompt
                chunk = {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "created": 0,
                    "model": body.get("model", ""),
                    "choices": [choice],
                }
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
                await asyncio.sleep(0)
                if done:
                    break
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def admin(request: Request) -> Response:
        raw = await request.body()
        state.admin.append(
            (request.url.path, {**dict(request.query_params), **(orjson.loads(raw) if raw else {})})
        )
        if request.url.path == "/pause":
            state.paused = True
            return JSONResponse({"status": "paused"})
        if request.url.path == "/resume":
            state.paused = False
            return JSONResponse({"status": "resumed"})
        if request.url.path == "/collective_rpc":
            return JSONResponse({"results": [None]})
        return Response(status_code=200)

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/health", health),
            *(
                Route(p, admin, methods=["POST"])
                for p in ("/pause", "/resume", "/collective_rpc", "/reset_prefix_cache")
            ),
        ]
    )


def sglang_app(state: FakeState) -> Starlette:
    async def generate(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.requests.append(body)
        prompt = body["input_ids"]
        sp = body.get("sampling_params", {})
        max_tokens = sp.get("max_new_tokens", 128)

        async def events() -> AsyncIterator[bytes]:
            text, ids, triples = "", [], []
            for i in range(max_tokens):
                if state.die_after is not None and i >= state.die_after:
                    raise ConnectionResetError("replica died")
                token = fake_token(prompt, i)
                text += f"t{token} "
                ids.append(token)
                triples.append([fake_logprob(token), token, None])
                done = _finish(
                    prompt,
                    i,
                    text,
                    token,
                    max_tokens,
                    sp.get("stop") or [],
                    sp.get("stop_token_ids") or [],
                )
                finish = None
                if done and done[0] == "length":
                    finish = {"type": "length", "length": max_tokens}
                elif done:
                    finish = {"type": "stop", "matched": done[1]}
                out_ids = ids[-1:] if state.incremental else list(ids)
                out_lp = triples[-1:] if state.incremental else list(triples)
                event = {
                    "text": f"t{token} " if state.incremental else text,
                    "output_ids": out_ids,
                    "meta_info": {
                        "id": body.get("rid", "r"),
                        "finish_reason": finish,
                        "prompt_tokens": len(prompt),
                        "completion_tokens": i + 1,
                        "cached_tokens": 0,
                        "output_token_logprobs": out_lp,
                    },
                }
                yield b"data: " + orjson.dumps(event) + b"\n\n"
                await asyncio.sleep(0)
                if done:
                    break
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def update_weights(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.admin.append((request.url.path, body))
        if not str(body.get("model_path", "")).startswith("/"):
            return JSONResponse({"success": False, "message": "model_path must be absolute"})
        state.weight_version = body.get("weight_version") or state.weight_version
        return JSONResponse({"success": True, "message": "Succeeded to update model weights."})

    async def admin(request: Request) -> Response:
        raw = await request.body()
        state.admin.append((request.url.path, orjson.loads(raw) if raw else {}))
        state.paused = request.url.path == "/pause_generation"
        return Response(status_code=200)

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/generate", generate, methods=["POST"]),
            Route("/health", health),
            Route("/update_weights_from_disk", update_weights, methods=["POST"]),
            Route("/pause_generation", admin, methods=["POST"]),
            Route("/continue_generation", admin, methods=["POST"]),
        ]
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """A uvicorn server for ``app`` on 127.0.0.1, inside the running event loop."""

    def __init__(self, app: Starlette, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off", ws="none"
        )
        self.server = uvicorn.Server(config)
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Served:
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
