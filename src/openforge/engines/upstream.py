"""A teacher model behind a commercial API, as a text-level engine.

The conversation goes to an OpenAI-compatible ``POST {base}/chat/completions`` or an
Anthropic-compatible ``POST {base}/v1/messages`` as is; the answer comes back as one
:class:`Completion` (text, reasoning, tool calls, usage) with no token ids or logprobs.
Its calls are teacher calls (``EngineInfo.kind == "upstream"``): exported for SFT, never
as RL samples.

Base URL and key come from the arguments, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
or ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import orjson

from openforge.conversation import (
    Completion,
    Conversation,
    FinishReason,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    Usage,
)
from openforge.engines.base import EngineError, EngineInfo, EngineOverloaded

__all__ = ["UpstreamEngine", "anthropic_body", "openai_body"]

Api = Literal["openai", "anthropic"]
_DEFAULT_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_ANTHROPIC_VERSION = "2023-06-01"


class UpstreamEngine:
    """Passes conversations to an OpenAI- or Anthropic-compatible API (a teacher)."""

    def __init__(
        self,
        api: Api,
        *,
        url: str | None = None,
        api_key: str | None = None,
        model: str = "",
        context_length: int = 200_000,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if api not in ("openai", "anthropic"):
            raise EngineError(f"--api must be openai or anthropic, not {api!r}")
        env = api.upper()
        self.api: Api = api
        self.url = (url or os.environ.get(f"{env}_BASE_URL") or _DEFAULT_URL[api]).rstrip("/")
        self._key = api_key or os.environ.get(f"{env}_API_KEY", "")
        self.model = model
        self.context_length = context_length
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))

    def info(self) -> EngineInfo:
        """Kind "upstream": calls through this engine are teacher calls."""
        return EngineInfo(
            kind="upstream", model=self.model or self.url, context_length=self.context_length
        )

    async def complete(self, conversation: Conversation) -> AsyncIterator[Completion]:
        """Ask the upstream API and yield its one finished answer."""
        model = self.model or conversation.model
        if self.api == "openai":
            path, body = "/chat/completions", openai_body(conversation, model)
            headers = {"Authorization": f"Bearer {self._key}"}
        else:
            path, body = "/v1/messages", anthropic_body(conversation, model)
            headers = {"x-api-key": self._key, "anthropic-version": _ANTHROPIC_VERSION}
        try:
            response = await self.client.post(
                self.url + path,
                content=orjson.dumps(body),
                headers={"Content-Type": "application/json", **headers},
            )
        except httpx.HTTPError as exc:
            raise EngineError(f"upstream {self.url} unreachable: {exc!r}") from exc
        data = _json_or_error(response, self.url)
        yield _parse_openai(data, model) if self.api == "openai" else _parse_anthropic(data, model)

    async def close(self) -> None:
        """Close the HTTP client if this engine made it."""
        if self._own_client:
            await self.client.aclose()


def _json_or_error(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        data = {"error": {"message": response.text[:500]}}
    if response.status_code >= 400 or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        text = f"upstream {url}: HTTP {response.status_code}: {message or response.text[:500]}"
        if response.status_code in (429, 503, 529):
            raise EngineOverloaded(text)
        raise EngineError(text)
    return data


# ---- OpenAI chat completions -------------------------------------------------------------


def openai_body(conversation: Conversation, model: str) -> dict[str, Any]:
    """The chat-completions request for ``conversation``."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [_openai_message(m) for m in conversation.messages],
    }
    if conversation.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in conversation.tools
        ]
        choice = conversation.tool_choice
        body["tool_choice"] = (
            {"type": "function", "function": {"name": choice.name}} if choice.name else choice.mode
        )
        body["parallel_tool_calls"] = conversation.parallel_tool_calls
    _common_params(body, conversation, "max_tokens")
    if conversation.params.seed is not None:
        body["seed"] = conversation.params.seed
    return body


def _openai_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ]
        return out
    if message.role == "user" and any(isinstance(p, ImagePart) for p in message.content):
        parts = [
            {"type": "text", "text": p.text}
            if isinstance(p, TextPart)
            else {"type": "image_url", "image_url": {"url": p.url}}
            for p in message.content
        ]
        return {"role": "user", "content": parts}
    return {"role": message.role, "content": message.text}


def _parse_openai(data: dict[str, Any], model: str) -> Completion:
    choices = data.get("choices") or []
    if not choices:
        raise EngineError(f"upstream answer has no choices: {str(data)[:300]}")
    message = choices[0].get("message") or {}
    calls = [
        ToolCall(
            id=c.get("id", ""),
            name=c["function"]["name"],
            arguments=c["function"].get("arguments") or "{}",
        )
        for c in message.get("tool_calls") or []
    ]
    finish = {"length": "length", "tool_calls": "tool_calls"}.get(
        choices[0].get("finish_reason") or "stop", "stop"
    )
    usage = data.get("usage") or {}
    return Completion(
        text=message.get("content") or "",
        reasoning=message.get("reasoning_content") or message.get("reasoning"),
        tool_calls=calls,
        finish_reason=_finish(finish),
        usage=Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
        model=data.get("model") or model,
    )


# ---- Anthropic messages ------------------------------------------------------------------


def anthropic_body(conversation: Conversation, model: str) -> dict[str, Any]:
    """The Messages API request for ``conversation``."""
    system = "\n\n".join(m.text for m in conversation.messages if m.role in ("system", "developer"))
    messages: list[dict[str, Any]] = []
    for message in conversation.messages:
        if message.role in ("system", "developer"):
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _anthropic_blocks(message)
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # tool results share one user turn
        else:
            messages.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": conversation.params.max_tokens or 4096,
    }
    if system:
        body["system"] = system
    if conversation.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in conversation.tools
        ]
        choice = conversation.tool_choice
        body["tool_choice"] = (
            {"type": "tool", "name": choice.name}
            if choice.name
            else {"type": {"auto": "auto", "none": "none", "required": "any"}[choice.mode]}
        )
    _common_params(body, conversation, None)
    return body


def _anthropic_blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.text}
        ]
    blocks: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append({"type": "image", "source": _image_source(part)})
    for call in message.tool_calls:
        try:
            arguments = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            arguments = {"_raw": call.arguments}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _image_source(part: ImagePart) -> dict[str, Any]:
    if part.url.startswith("data:") and ";base64," in part.url:
        head, data = part.url[5:].split(";base64,", 1)
        return {"type": "base64", "media_type": part.media_type or head, "data": data}
    return {"type": "url", "url": part.url}


def _parse_anthropic(data: dict[str, Any], model: str) -> Completion:
    text, reasoning, calls = [], [], []
    for block in data.get("content") or []:
        kind = block.get("type")
        if kind == "text":
            text.append(block.get("text", ""))
        elif kind == "thinking":
            reasoning.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls.append(
                ToolCall(
                    id=block.get("id", ""),
                    name=block.get("name", ""),
                    arguments=orjson.dumps(block.get("input") or {}).decode(),
                )
            )
    finish = {"max_tokens": "length", "tool_use": "tool_calls"}.get(
        data.get("stop_reason") or "end_turn", "stop"
    )
    usage = data.get("usage") or {}
    return Completion(
        text="".join(text),
        reasoning="".join(reasoning) or None,
        tool_calls=calls,
        finish_reason=_finish(finish),
        usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
        model=data.get("model") or model,
    )


# ---- shared ------------------------------------------------------------------------------


def _common_params(body: dict[str, Any], conversation: Conversation, max_key: str | None) -> None:
    params = conversation.params
    if max_key and params.max_tokens is not None:
        body[max_key] = params.max_tokens
    if params.temperature != 1.0:
        body["temperature"] = params.temperature
    if params.top_p != 1.0:
        body["top_p"] = params.top_p
    if params.stop:
        body["stop" if max_key else "stop_sequences"] = params.stop


def _finish(value: str) -> FinishReason:
    return "length" if value == "length" else "tool_calls" if value == "tool_calls" else "stop"
