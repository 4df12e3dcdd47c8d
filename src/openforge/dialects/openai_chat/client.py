"""Chat Completions as a client: canonical :class:`Conversation` -> request, answer ->
:class:`Completion` (the reverse of :mod:`~openforge.dialects.openai_chat.parse` and
:mod:`~openforge.dialects.openai_chat.render`)."""

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
from openforge.dialects.client import AnswerError, WireRequest, sampling_fields

__all__ = ["ChatClient"]


class ChatClient:
    """Asks an OpenAI-compatible ``POST {base}/chat/completions``."""

    path = "/chat/completions"

    def request(self, conversation: Conversation, model: str, api_key: str) -> WireRequest:
        """The chat-completions request for ``conversation``, with a bearer key."""
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"}
        return WireRequest(self.path, headers, orjson.dumps(request_body(conversation, model)))

    def parse(self, data: Mapping[str, Any], model: str) -> Completion:
        """A ``chat.completion`` object's first choice (AnswerError when it has none)."""
        choices = data.get("choices") or []
        if not choices:
            raise AnswerError(f"upstream answer has no choices: {str(data)[:300]}")
        message = choices[0].get("message") or {}
        calls = [
            ToolCall(
                id=c.get("id", ""),
                name=c["function"]["name"],
                arguments=c["function"].get("arguments") or "{}",
            )
            for c in message.get("tool_calls") or []
        ]
        usage = data.get("usage") or {}
        return Completion(
            text=message.get("content") or "",
            reasoning=message.get("reasoning_content") or message.get("reasoning"),
            tool_calls=calls,
            finish_reason=_finish(choices[0].get("finish_reason")),
            usage=Usage(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
            model=data.get("model") or model,
        )


def request_body(conversation: Conversation, model: str) -> dict[str, Any]:
    """The chat-completions request body for ``conversation``, as JSON values."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [_message(m) for m in conversation.messages],
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
    params = conversation.params
    if params.max_tokens is not None:
        body["max_tokens"] = params.max_tokens
    body.update(sampling_fields(params, "stop"))
    if params.seed is not None:
        body["seed"] = params.seed
    return body


def _message(message: Message) -> dict[str, Any]:
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


def _finish(value: object) -> FinishReason:
    """The wire ``finish_reason`` as a canonical one (anything unknown is a plain stop)."""
    return "length" if value == "length" else "tool_calls" if value == "tool_calls" else "stop"
