"""What bench/gateway.py sends and what answers it: agent-shaped bodies and an instant engine.

Bodies (each call carries new content, a slice of this checkout's own source as a tool
would print it, so no two calls tokenize alike):

* ``agent``  — Chat Completions, 21.6 KB at 3 KB of new content: a 6 KB system prompt,
               10 tools with JSON schemas, a task, one assistant tool call and its result
               (the new content);
* ``claude`` — the recorded Claude Code first request (Anthropic Messages, 82 KB, 24
               tools) plus the assistant's Bash ``tool_use`` and its ``tool_result``;
* ``codex``  — the recorded Codex request (Responses, 44 KB) plus a ``function_call``
               and its ``function_call_output``.

The engine is a vLLM-shaped server on uvicorn: ``/v1/completions`` with token-id prompts
streams one chunk per token with ``token_ids``, ``logprobs`` and, on the first chunk,
``prompt_token_ids`` (what vLLM sends with ``return_token_ids``), or answers a
``"stream": false`` request with one ``CompletionResponse`` (the gateway's JSON calls);
``/v1/chat/completions`` answers the peer and the no-gateway baseline with the same text,
logprobs and token ids.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson

CHECKOUT = Path(__file__).resolve().parents[1]
ANSWER = "The answer is forty-two, computed from the six by seven table above."
_FIXTURES = (
    CHECKOUT.parent / "shared" / "fixtures" / "harness-requests",
    CHECKOUT / "tests" / "dialects" / "fixtures",
)
_MARK = "\u0001NEW\u0001"  # where a call's new content goes in a body template


def fixture(name: str) -> dict[str, Any]:
    """A recorded harness request (the shared fixtures beside the checkout, else the tests')."""
    for root in _FIXTURES:
        if (root / name).is_file():
            return dict(json.loads((root / name).read_text()))
    raise SystemExit(f"recorded fixture {name} is in none of {[str(r) for r in _FIXTURES]}")


def corpus() -> str:
    """What tools print: this checkout's Python source, concatenated."""
    files = sorted((CHECKOUT / "src" / "openforge").rglob("*.py"))
    return "".join(p.read_text() for p in files)


class NewContent:
    """A fresh slice of ``corpus()`` per call, headed by a unique command line."""

    def __init__(self, text: str, seed: int) -> None:
        self.text = text
        self.rng = random.Random(seed)
        self.n = 0

    def take(self, size: int) -> str:
        """About ``size`` characters no earlier call sent."""
        self.n += 1
        at = self.rng.randrange(0, len(self.text) - size)
        return (
            f"$ sed -n {at},+{size}p src/file_{self.n}_{self.rng.getrandbits(32)}.py\n"
            + (self.text[at : at + size])
        )


def _tool(name: str, props: dict[str, str]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            k: {"type": t, "description": f"The {k} for {name}; see the tool description."}
            for k, t in props.items()
        },
        "required": list(props)[:1],
        "additionalProperties": False,
    }
    text = f"{name}: " + "Use it when the task needs it, and read its output with care. " * 13
    return {
        "type": "function",
        "function": {"name": name, "description": text, "parameters": schema},
    }


AGENT_TOOLS = [
    _tool("bash", {"command": "string", "timeout": "integer", "description": "string"}),
    _tool("read_file", {"path": "string", "offset": "integer", "limit": "integer"}),
    _tool("write_file", {"path": "string", "content": "string"}),
    _tool("edit_file", {"path": "string", "old": "string", "new": "string", "all": "boolean"}),
    _tool("glob", {"pattern": "string", "path": "string"}),
    _tool("grep", {"pattern": "string", "path": "string", "glob": "string", "context": "integer"}),
    _tool("list_dir", {"path": "string", "depth": "integer"}),
    _tool("web_fetch", {"url": "string", "prompt": "string"}),
    _tool("todo_write", {"todos": "string"}),
    _tool("task", {"description": "string", "prompt": "string", "agent": "string"}),
]
AGENT_SYSTEM = (
    "You are a coding agent working in a repository on the user's machine. "
    "Read files before you edit them, run the tests you touch, and keep changes small. "
) * 36  # ~6 KB, the size of a harness system prompt
_CALL = {"command": "sed -n 1,120p src/openforge/gateway/service.py", "timeout": 30}


def _agent(stream: bool) -> dict[str, Any]:
    return {
        "model": "bench",
        "stream": stream,
        "tools": AGENT_TOOLS,
        "messages": [
            {"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": "Find why the gateway's stream ends early and fix it."},
            {
                "role": "assistant",
                "content": "Let me read the service first.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps(_CALL)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": _MARK},
        ],
    }


def _claude(stream: bool) -> dict[str, Any]:
    body = fixture("claude-code-2.1.197.messages.first-call.json")
    body["stream"] = stream
    body["messages"] += [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look at the service."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": _CALL},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": _MARK}],
        },
    ]
    return body


def _codex(stream: bool) -> dict[str, Any]:
    body = fixture("codex-0.171.0.responses.first-call.json")
    body["stream"] = stream
    body["input"] += [
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "call_01",
            "arguments": json.dumps({"command": ["bash", "-lc", _CALL["command"]]}),
        },
        {"type": "function_call_output", "call_id": "call_01", "output": _MARK},
    ]
    return body


WORKLOADS = {
    "agent": ("/v1/chat/completions", _agent),
    "claude": ("/v1/messages", _claude),
    "codex": ("/v1/responses", _codex),
}


class Template:
    """A body as bytes around the slot of its new content (one JSON string)."""

    def __init__(self, workload: str, stream: bool) -> None:
        self.path, build = WORKLOADS[workload]
        head, tail = orjson.dumps(build(stream)).split(orjson.dumps(_MARK)[1:-1])
        self.head, self.tail = head, tail

    def body(self, content: str) -> bytes:
        """The body with ``content`` in the slot."""
        return self.head + orjson.dumps(content)[1:-1] + self.tail


def growing_body(stream: bool, results: list[str], workload: str = "agent") -> bytes:
    """The body of a rollout's call after ``len(results) - 1`` answered turns: each earlier
    result is followed by the gateway's answer (``ANSWER``) and a new user turn, in the
    workload's dialect as its harness sends it (Claude Code moves its cache marker to the
    newest message on every call)."""
    body = WORKLOADS[workload][1](stream)
    if workload == "codex":
        items = body["input"]
        items[-1]["output"] = results[0]
        for text in results[1:]:
            items += [
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": ANSWER}]},
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": text}]},
            ]  # fmt: skip
    elif workload == "claude":
        msgs = body["messages"]
        msgs[-1]["content"][0]["content"] = results[0]
        for text in results[1:]:
            msgs += [
                {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
                {"role": "user", "content": [{"type": "text", "text": text}]},
            ]
        for m in msgs:  # the marker sits on the newest message only
            if isinstance(m["content"], list):
                for block in m["content"]:
                    block.pop("cache_control", None)
        msgs[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    else:
        msgs = body["messages"]
        msgs[-1]["content"] = results[0]
        for text in results[1:]:
            msgs += [{"role": "assistant", "content": ANSWER}, {"role": "user", "content": text}]
    return orjson.dumps(body)


# ---- the instant engine server ------------------------------------------------------


def _completion(start: int, ids: list[int], pieces: list[str], last: bool) -> dict[str, Any]:
    """A ``/v1/completions`` object holding the answer's tokens from ``start`` on: one
    stream chunk (a token each) or the whole answer."""
    choice: dict[str, Any] = {
        "index": 0,
        "text": "".join(pieces),
        "token_ids": ids,
        "logprobs": {
            "tokens": pieces,
            "token_logprobs": [-0.01 * (start + i + 1) for i in range(len(ids))],
            "top_logprobs": None,
            "text_offset": [0] * len(ids),
        },
        "finish_reason": "stop" if last else None,
        "stop_reason": None,
    }
    return {"id": "cmpl-x", "object": "text_completion", "created": 0, "model": "bench",
            "choices": [choice]}  # fmt: skip


def _chat_answer(ids: list[int], pieces: list[str], prompt: int) -> bytes:
    content = [
        {"token": p, "logprob": -0.01 * (i + 1), "bytes": list(p.encode()), "top_logprobs": []}
        for i, p in enumerate(pieces)
    ]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": ANSWER},
        "logprobs": {"content": content},
        "finish_reason": "stop",
        "token_ids": ids,
    }
    return orjson.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [choice],
            "prompt_token_ids": list(range(prompt)),
            "usage": {"prompt_tokens": prompt, "completion_tokens": len(ids)},
        }
    )


def _chat_stream(ids: list[int], pieces: list[str], prompt: int) -> list[bytes]:
    def chunk(delta: dict[str, Any], i: int, finish: str | None = None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if i >= 0:
            p = pieces[i]
            choice["logprobs"] = {"content": [{"token": p, "logprob": -0.01, "bytes": list(
                p.encode()), "top_logprobs": []}]}  # fmt: skip
            choice["token_ids"] = [ids[i]]
        body = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0,
                "model": "bench", "choices": [choice]}  # fmt: skip
        if i == -1:
            body["prompt_token_ids"] = list(range(prompt))
        return b"data: " + orjson.dumps(body) + b"\n\n"

    parts = [chunk({"role": "assistant", "content": ""}, -1)]
    parts += [chunk({"content": p}, i, "stop" if i == len(ids) - 1 else None)
              for i, p in enumerate(pieces)]  # fmt: skip
    return [*parts, b"data: [DONE]\n\n"]


def serve_engine(port: int, ids: list[int], pieces: list[str]) -> None:
    """Serve the instant engine on 127.0.0.1:``port`` until killed. ``ids`` decode to
    ``ANSWER`` + end of turn; ``pieces`` are their texts."""
    import uvicorn

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        req = orjson.loads(b"".join(chunks))
        if scope["path"].endswith("/v1/completions"):
            await _send_completions(send, req, ids, pieces)
            return
        prompt = len(chunks[0]) // 4  # about as many tokens as a chat body has
        if req.get("stream"):
            await _send_sse(send, _chat_stream(ids, pieces, prompt))
            return
        head = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": _chat_answer(ids, pieces, prompt)})

    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", loop="uvloop",
                log_level="warning", access_log=False, lifespan="off")  # fmt: skip


async def _send_completions(
    send: Any, req: dict[str, Any], ids: list[int], pieces: list[str]
) -> None:
    if not req.get("stream"):  # vLLM's CompletionResponse: the whole output in one choice
        answer = _completion(0, ids, pieces, True)
        answer["choices"][0].update(prompt_logprobs=None, prompt_token_ids=req["prompt"])
        n = len(req["prompt"])
        answer["usage"] = {"prompt_tokens": n, "total_tokens": n + len(ids),
                           "completion_tokens": len(ids)}  # fmt: skip
        head = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": orjson.dumps(answer)})
        return
    parts = []
    for i, (tid, piece) in enumerate(zip(ids, pieces, strict=True)):
        chunk = _completion(i, [tid], [piece], i == len(ids) - 1)
        if i == 0:
            chunk["choices"][0]["prompt_token_ids"] = req["prompt"]
        parts.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    await _send_sse(send, [*parts, b"data: [DONE]\n\n"])


async def _send_sse(send: Any, parts: list[bytes]) -> None:
    head = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    for part in parts:
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
