"""Local stand-ins for vLLM and SGLang (which need a GPU) speaking their documented shapes.

Each shape below was checked against the servers' own code (late-2026 ``main``; see the
module docstrings of ``openforge.engines.vllm`` and ``openforge.engines.sglang``):

vLLM ``POST /v1/completions``: request validated like ``CompletionRequest`` (unknown
fields are ignored and recorded, as vLLM ignores them with a warning; a field left out
is filled from the model's generation config before the OpenAI default); the stream is
``CompletionStreamResponse`` chunks serialized with ``exclude_unset`` (``token_ids``
and ``stop_reason`` always set, ``prompt_token_ids`` on the first chunk only,
``--stream-interval`` tokens per chunk), ``data: [DONE]`` last; errors are
``{"error": {"message", "type", "param", "code"}}``. Dev endpoints: ``/pause?mode=``,
``/resume``, ``/collective_rpc``, ``/reset_prefix_cache``, and ``/health``.

SGLang ``POST /generate``: ``sampling_params`` keys checked against ``SamplingParams``
(an unknown key fails the request); the stream is cumulative (``text`` null until the
last object) or, with ``--incremental-streaming-output``, incremental; ``finish_reason``
objects as ``BaseFinishReason.to_json``; ``/update_weights_from_disk`` answers 400 when
it fails; ``/pause_generation`` checks its mode; ``/continue_generation``; ``/health``.

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

FAKE_EOS = 7  # never produced by fake_token (>= 10); a test can make it the stop token

# CompletionRequest fields (vllm/entrypoints/openai/completion/protocol.py) that the
# client may send; anything else is "present in the request but ignored" by vLLM.
VLLM_FIELDS = {
    "model",
    "prompt",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "suffix",
    "temperature",
    "top_p",
    "user",
    "use_beam_search",
    "top_k",
    "min_p",
    "repetition_penalty",
    "length_penalty",
    "stop_token_ids",
    "include_stop_str_in_output",
    "ignore_eos",
    "min_tokens",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "truncate_prompt_tokens",
    "allowed_token_ids",
    "prompt_logprobs",
    "bad_words",
    "add_special_tokens",
    "priority",
    "request_id",
    "return_tokens_as_token_ids",
    "return_token_ids",
    "cache_salt",
    "stream_interval",
}
# CompletionRequest._DEFAULT_SAMPLING_PARAMS: the OpenAI defaults after the server's.
VLLM_DEFAULTS = {
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
}
# SamplingParams API fields (python/sglang/srt/sampling/sampling_params.py).
SGLANG_SAMPLING_FIELDS = {
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "custom_params",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
}


def fake_token(prompt: list[int], i: int) -> int:
    return (sum(prompt) * 31 + i * 17) % 5000 + 10


def fake_logprob(token: int) -> float:
    return -(token % 100) / 50.0


@dataclass
class FakeState:
    requests: list[dict[str, Any]] = field(default_factory=list)
    admin: list[tuple[str, Any]] = field(default_factory=list)
    die_after: int | None = None  # drop the connection after this many tokens
    error_after: int | None = None  # stream an error event after this many tokens
    incremental: bool = False  # SGLang --incremental-streaming-output
    stream_interval: int = 1  # vLLM --stream-interval: tokens per chunk
    eos_at: int | None = None  # emit FAKE_EOS as token number eos_at (a model's EOS)
    # The model's generation_config.json sampling defaults (vLLM applies them first).
    generation_config: dict[str, Any] = field(default_factory=dict)
    effective: list[dict[str, Any]] = field(default_factory=list)  # resolved params
    ignored_fields: list[str] = field(default_factory=list)
    paused: str | None = None
    weight_version: str = "0"
    weights_path: str | None = None


def _token_at(prompt: list[int], i: int, state: FakeState) -> int:
    return FAKE_EOS if state.eos_at == i else fake_token(prompt, i)


def _finish(
    i: int, text: str, token: int, max_tokens: int, stops: list[str], stop_ids: list[int]
) -> tuple[str, Any] | None:
    """(kind, matched): vLLM and SGLang check stop tokens, then max length, then strings."""
    if token == FAKE_EOS:
        return "eos", token
    if token in stop_ids:
        return "stop", token
    for stop in stops:
        if stop in text:
            return "stop", stop
    if i + 1 >= max_tokens:
        return "length", None
    return None


def _vllm_logprobs(ids: list[int]) -> dict[str, Any]:
    """``CompletionLogProbs`` of ``ids`` (each token's text is ``f"t{id} "``)."""
    return {
        "text_offset": [0] * len(ids),
        "token_logprobs": [fake_logprob(t) for t in ids],
        "tokens": [f"t{t} " for t in ids],
        "top_logprobs": [{f"t{t} ": fake_logprob(t)} for t in ids],
    }


def _vllm_error(message: str, param: str | None = None) -> Response:
    error = {"message": message, "type": "BadRequestError", "param": param, "code": 400}
    return JSONResponse({"error": error}, status_code=400)


def _vllm_validate(body: dict[str, Any], state: FakeState) -> Response | None:
    state.ignored_fields += sorted(set(body) - VLLM_FIELDS)
    prompt = body.get("prompt")
    if not (isinstance(prompt, list) and all(isinstance(t, int) and t >= 0 for t in prompt)):
        return _vllm_error("prompt must be a list of non-negative token ids", "prompt")
    resolved = {
        name: body[name]
        if body.get(name) is not None
        else state.generation_config.get(name, default)
        for name, default in VLLM_DEFAULTS.items()
    }
    if resolved["top_k"] < -1:
        return _vllm_error(f"top_k must be 0 (disable), or at least 1, got {resolved['top_k']}.")
    if not 0.0 < resolved["top_p"] <= 1.0:
        return _vllm_error(f"top_p must be in (0, 1], got {resolved['top_p']}.")
    if body.get("logprobs") is not None and body["logprobs"] > 20:
        return _vllm_error("Requested sample logprobs of more than 20", "logprobs")
    state.effective.append(resolved)
    return None


def vllm_app(state: FakeState) -> Starlette:
    async def completions(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.requests.append(body)
        if (error := _vllm_validate(body, state)) is not None:
            return error
        prompt: list[int] = body["prompt"]
        max_tokens = body.get("max_tokens") or 16
        keep_stop = bool(body.get("include_stop_str_in_output"))

        def chunk(ids: list[int], text: str, done: tuple[str, Any] | None, first: bool) -> bytes:
            choice: dict[str, Any] = {
                "index": 0,
                "text": text,
                "logprobs": _vllm_logprobs(ids),
                "finish_reason": "length"
                if done and done[0] == "length"
                else ("stop" if done else None),
                "stop_reason": done[1] if done and done[0] == "stop" else None,
                "prompt_token_ids": prompt if first else None,
                "token_ids": ids,
            }
            event = {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": body.get("model") or "served",
                "choices": [choice],
            }
            return b"data: " + orjson.dumps(event) + b"\n\n"

        if not body.get("stream"):
            return _vllm_whole(body, prompt, max_tokens, keep_stop, state)

        async def events() -> AsyncIterator[bytes]:
            text, sent, pending, first = "", 0, [], True
            for i in range(max_tokens):
                if state.die_after is not None and i >= state.die_after:
                    raise ConnectionResetError("replica died")
                if state.error_after is not None and i >= state.error_after:
                    # What completion_stream_generator yields on a GenerationError.
                    error = {
                        "message": "Internal server error",
                        "type": "InternalServerError",
                        "param": None,
                        "code": 500,
                    }
                    yield b"data: " + orjson.dumps({"error": error}) + b"\n\n"
                    break
                token = _token_at(prompt, i, state)
                text += "" if token == FAKE_EOS else f"t{token} "
                done = _finish(
                    i,
                    text,
                    token,
                    max_tokens,
                    body.get("stop") or [],
                    body.get("stop_token_ids") or [],
                )
                visible = text
                if done and isinstance(done[1], str) and not keep_stop:
                    visible = text[: text.index(done[1])]  # the text is trimmed, ids are not
                pending.append(token)
                if done or len(pending) >= state.stream_interval:
                    yield chunk(pending, visible[sent:], done, first)
                    sent, pending, first = len(visible), [], False
                    await asyncio.sleep(0)
                if done:
                    break
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def pause(request: Request) -> Response:
        mode = request.query_params.get("mode", "abort")
        state.admin.append(("/pause", dict(request.query_params)))
        if mode not in ("abort", "wait", "keep"):
            detail = [
                {"loc": ["query", "mode"], "msg": "Input should be 'abort', 'wait' or 'keep'"}
            ]
            return JSONResponse({"detail": detail}, status_code=422)
        state.paused = mode
        return JSONResponse({"status": "paused"})

    async def resume(request: Request) -> Response:
        state.admin.append(("/resume", {}))
        state.paused = None
        return JSONResponse({"status": "resumed"})

    async def collective_rpc(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.admin.append(("/collective_rpc", body))
        if body.get("method") is None:
            return JSONResponse({"detail": "Missing 'method' in request body"}, status_code=400)
        kwargs = body.get("kwargs", {})
        if body["method"] == "reload_weights":
            path = kwargs.get("weights_path")
            if not (isinstance(path, str) and path.startswith("/")):
                # vLLM answers an exception in the worker with a 500.
                return JSONResponse(
                    {"error": {"message": f"No such directory: {path}", "code": 500}},
                    status_code=500,
                )
            state.weights_path = path
        return JSONResponse({"results": [None]})

    async def reset_prefix_cache(request: Request) -> Response:
        state.admin.append(("/reset_prefix_cache", dict(request.query_params)))
        return JSONResponse({"success": state.paused != "keep"})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/health", health),
            Route("/pause", pause, methods=["POST"]),
            Route("/resume", resume, methods=["POST"]),
            Route("/collective_rpc", collective_rpc, methods=["POST"]),
            Route("/reset_prefix_cache", reset_prefix_cache, methods=["POST"]),
        ]
    )


def _vllm_whole(
    body: dict[str, Any], prompt: list[int], max_tokens: int, keep_stop: bool, state: FakeState
) -> Response:
    """A ``"stream": false`` request's ``CompletionResponse``; a failure during generation
    is the error answer vLLM's non-streaming route gives (a dead replica: a 500 without
    a JSON body, as an unhandled exception gets)."""
    text, ids = "", []
    done: tuple[str, Any] | None = None
    for i in range(max_tokens):
        if state.die_after is not None and i >= state.die_after:
            return Response("Internal Server Error", status_code=500)
        if state.error_after is not None and i >= state.error_after:
            error = {"message": "Internal server error", "type": "InternalServerError",
                     "param": None, "code": 500}  # fmt: skip
            return JSONResponse({"error": error}, status_code=500)
        token = _token_at(prompt, i, state)
        text += "" if token == FAKE_EOS else f"t{token} "
        ids.append(token)
        stops = (body.get("stop") or [], body.get("stop_token_ids") or [])
        done = _finish(i, text, token, max_tokens, *stops)
        if done:
            break
    if done and isinstance(done[1], str) and not keep_stop:
        text = text[: text.index(done[1])]  # the text is trimmed, ids are not
    choice = {
        "index": 0,
        "text": text,
        "logprobs": _vllm_logprobs(ids),
        "finish_reason": "length" if done and done[0] == "length" else "stop",
        "stop_reason": done[1] if done and done[0] == "stop" else None,
        "token_ids": ids,
        "prompt_logprobs": None,
        "prompt_token_ids": prompt,
    }
    usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
             "completion_tokens": len(ids), "prompt_tokens_details": None}  # fmt: skip
    answer = {"id": "cmpl-1", "object": "text_completion", "created": 0,
              "model": body.get("model") or "served", "choices": [choice], "usage": usage,
              "service_tier": None, "system_fingerprint": None,
              "kv_transfer_params": None}  # fmt: skip
    return Response(orjson.dumps(answer), media_type="application/json")


def _sglang_finish(done: tuple[str, Any] | None, max_tokens: int) -> dict[str, Any] | None:
    if done is None:
        return None
    if done[0] == "length":
        return {"type": "length", "length": max_tokens}
    return {"type": "stop", "matched": done[1]}


def _sglang_verify(sp: dict[str, Any]) -> str | None:
    """The ValueError message of ``SamplingParams.verify`` for these params, if any."""
    top_k, top_p = sp.get("top_k", -1), sp.get("top_p", 1.0)
    if not 0.0 < top_p <= 1.0:
        return f"top_p must be in (0, 1], got {top_p}."
    if top_k != -1 and top_k < 1:
        return f"top_k must be -1 (disable) or at least 1, got {top_k}."
    return None


def sglang_app(state: FakeState) -> Starlette:
    async def generate(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.requests.append(body)
        sp = body.get("sampling_params") or {}
        unknown = sorted(set(sp) - SGLANG_SAMPLING_FIELDS)
        if unknown:
            message = f"SamplingParams.__init__() got an unexpected keyword argument {unknown[0]!r}"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        problem = _sglang_verify(sp)
        if problem is not None and not body.get("stream"):
            # Raised before the answer: the non-streaming route answers it with a 400.
            return JSONResponse({"error": {"message": problem}}, status_code=400)
        if problem is not None:
            # SamplingParams.verify raises ValueError inside the tokenizer manager, after
            # the streaming response started: http_server streams it as an error object.
            async def refused() -> AsyncIterator[bytes]:
                yield b"data: " + orjson.dumps({"error": {"message": problem}}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(refused(), media_type="text/event-stream")
        prompt = body["input_ids"]
        max_tokens = sp.get("max_new_tokens", 128)
        whole = not body.get("stream")

        async def events() -> AsyncIterator[bytes]:
            text, ids, triples = "", [], []
            for i in range(max_tokens):
                if state.die_after is not None and i >= state.die_after:
                    raise ConnectionResetError("replica died")
                token = _token_at(prompt, i, state)
                piece = "" if token == FAKE_EOS else f"t{token} "
                text += piece
                ids.append(token)
                triples.append([fake_logprob(token), token, None])
                done = _finish(
                    i,
                    text,
                    token,
                    max_tokens,
                    sp.get("stop") or [],
                    sp.get("stop_token_ids") or [],
                )
                meta = {
                    "id": body.get("rid", "r"),
                    "finish_reason": _sglang_finish(done, max_tokens),
                    "prompt_tokens": len(prompt),
                    "weight_version": state.weight_version,
                    "completion_tokens": i + 1,
                    "cached_tokens": 0,
                    "input_token_logprobs": [],
                    "output_token_logprobs": triples[-1:] if state.incremental else list(triples),
                    "output_token_logprobs_length": len(triples),
                }
                event: dict[str, Any]
                if whole and done:  # a whole answer: the last object, with all of it
                    meta["output_token_logprobs"] = list(triples)
                    yield orjson.dumps({"text": text, "output_ids": ids, "meta_info": meta})
                    return
                if whole:
                    continue
                if state.incremental:
                    event = {"text": piece, "output_ids": ids[-1:], "meta_info": meta}
                else:
                    event = {
                        "text": text if done else None,
                        "output_ids": list(ids),
                        "meta_info": meta,
                    }
                yield b"data: " + orjson.dumps(event) + b"\n\n"
                await asyncio.sleep(0)
                if done:
                    break
            yield b"data: [DONE]\n\n"

        if whole:
            try:
                answer = b"".join([part async for part in events()])
            except ConnectionResetError:
                return Response("Internal Server Error", status_code=500)
            return Response(answer, media_type="application/json")
        return StreamingResponse(events(), media_type="text/event-stream")

    async def update_weights(request: Request) -> Response:
        body = orjson.loads(await request.body())
        state.admin.append((request.url.path, body))
        if not str(body.get("model_path", "")).startswith("/"):
            answer = {
                "success": False,
                "message": "Failed to get weights iterator: "
                f"{body.get('model_path')} (repository not found).",
                "num_paused_requests": 0,
            }
            return JSONResponse(answer, status_code=400)
        state.weight_version = body.get("weight_version") or state.weight_version
        state.weights_path = body["model_path"]
        return JSONResponse(
            {
                "success": True,
                "message": "Succeeded to update model weights.",
                "num_paused_requests": 0,
            }
        )

    async def pause(request: Request) -> Response:
        raw = await request.body()
        body = orjson.loads(raw) if raw else {}
        state.admin.append((request.url.path, body))
        mode = body.get("mode", "abort")
        if mode not in ("abort", "retract", "in_place"):
            return JSONResponse({"detail": f"Invalid mode: {mode!r}"}, status_code=422)
        state.paused = mode
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def resume(request: Request) -> Response:
        raw = await request.body()
        state.admin.append((request.url.path, orjson.loads(raw) if raw else {}))
        state.paused = None
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/generate", generate, methods=["POST", "PUT"]),
            Route("/health", health),
            Route("/update_weights_from_disk", update_weights, methods=["POST"]),
            Route("/pause_generation", pause, methods=["POST"]),
            Route("/continue_generation", resume, methods=["POST"]),
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
