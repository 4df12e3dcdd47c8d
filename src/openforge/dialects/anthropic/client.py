"""Anthropic Messages as a client: canonical :class:`Conversation` -> request, Message ->
:class:`Completion` (the reverse of :mod:`~openforge.dialects.anthropic.parse` and
:mod:`~openforge.dialects.anthropic.render`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from openforge.dialects.client import WireRequest, sampling_fields

__all__ = ["VERSION", "MessagesClient"]

VERSION = "2023-06-01"  # the ``anthropic-version`` header every request carries
_DEFAULT_MAX_TOKENS = 4096  # Messages requires max_tokens; used when the conversation sets none
_TOOL_CHOICE = {"auto": "auto", "none": "none", "required": "any"}
_FINISH: dict[str, FinishReason] = {"max_tokens": "length", "tool_use": "tool_calls"}


class MessagesClient:
    """Asks an Anthropic-compatible ``POST {base}/v1/messages``."""

    path = "/v1/messages"

    def request(self, conversation: Conversation, model: str, api_key: str) -> WireRequest:
        """The Messages request for ``conversation``, with the key and API version."""
        headers = {
            "Content-Type": "application/json",
            "x-api-key": api_key,
            "anthropic-version": VERSION,
        }
        return WireRequest(self.path, headers, orjson.dumps(request_body(conversation, model)))

    def parse(self, data: Mapping[str, Any], model: str) -> Completion:
        """A Message object's text, thinking and tool uses."""
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
        stop = data.get("stop_reason")
        usage = data.get("usage") or {}
        return Completion(
            text="".join(text),
            reasoning="".join(reasoning) or None,
            tool_calls=calls,
            finish_reason=_FINISH.get(stop, "stop") if isinstance(stop, str) else "stop",
            usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
            model=data.get("model") or model,
        )


def request_body(conversation: Conversation, model: str) -> dict[str, Any]:
    """The Messages request body for ``conversation``, as JSON values: system and
    developer messages join into ``system``; tool results share one user turn."""
    system = "\n\n".join(m.text for m in conversation.messages if m.role in ("system", "developer"))
    messages: list[dict[str, Any]] = []
    for message in conversation.messages:
        if message.role in ("system", "developer"):
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # tool results share one user turn
        else:
            messages.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": conversation.params.max_tokens or _DEFAULT_MAX_TOKENS,
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
            else {"type": _TOOL_CHOICE[choice.mode]}
        )
    body.update(sampling_fields(conversation.params, "stop_sequences"))
    return body


def _blocks(message: Message) -> list[dict[str, Any]]:
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
