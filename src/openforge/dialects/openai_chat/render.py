"""Canonical :class:`Completion` -> Chat Completions JSON and stream chunks."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from openforge.conversation import Completion, CompletionDelta, FinishReason, Usage
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_chat.errors import error_object
from openforge.dialects.openai_chat.protocol import (
    ChatCompletion,
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    MessageOut,
    TokenLogprob,
    ToolCallOut,
    UsageOut,
)
from openforge.dialects.sse import DONE, frame

__all__ = ["ChatStreamEncoder", "finish_reason", "render_response"]


def finish_reason(reason: FinishReason) -> str:
    """The wire ``finish_reason``; "abort" and "error" never reach a client as such."""
    return reason if reason in ("stop", "length", "tool_calls") else "stop"


def _usage(usage: Usage) -> UsageOut:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _logprobs(completion: Completion, ctx: ResponseContext) -> ChoiceLogprobs | None:
    if not ctx.logprobs:
        return None
    content: list[TokenLogprob] = [
        {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
        for t, lp in ctx.sampled_tokens(completion)
    ]
    return {"content": content, "refusal": None}


def render_response(completion: Completion, ctx: ResponseContext) -> bytes:
    """The JSON body of a non-streaming ``chat.completion``."""
    message: MessageOut = {
        "role": "assistant",
        "content": completion.text if completion.text or not completion.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if completion.tool_calls:
        message["tool_calls"] = [
            ToolCallOut(
                id=c.id, type="function", function={"name": c.name, "arguments": c.arguments}
            )
            for c in completion.tool_calls
        ]
    if completion.reasoning:
        message["reasoning_content"] = completion.reasoning
    body: ChatCompletion = {
        "id": ctx.response_id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": _logprobs(completion, ctx),
                "finish_reason": finish_reason(completion.finish_reason),
            }
        ],
        "usage": _usage(completion.usage),
    }
    return orjson.dumps(body)


@dataclass(slots=True)
class ChatStreamEncoder:
    """Stream state for one ``chat.completion.chunk`` stream.

    Call :meth:`start` once, :meth:`delta` per event, then :meth:`finish` (or
    :meth:`error` once headers are sent). Each returns ready SSE bytes.
    """

    ctx: ResponseContext

    def _chunk(
        self, delta: Delta, finish: str | None = None, logprobs: ChoiceLogprobs | None = None
    ) -> bytes:
        choice: ChunkChoice = {
            "index": 0,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": finish,
        }
        return self._frame([choice])

    def _frame(self, choices: list[ChunkChoice], usage: UsageOut | None = None) -> bytes:
        chunk: ChatCompletionChunk = {
            "id": self.ctx.response_id,
            "object": "chat.completion.chunk",
            "created": self.ctx.created,
            "model": self.ctx.model,
            "system_fingerprint": None,
            "choices": choices,
        }
        if self.ctx.include_usage:
            # With include_usage every chunk carries "usage": null except the last one.
            chunk["usage"] = usage
        return frame(orjson.dumps(chunk))

    def start(self) -> bytes:
        """The first chunk: the assistant role with empty content."""
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, d: CompletionDelta) -> bytes:
        """One chunk for ``d``; a tool call's first chunk carries its id, type and name."""
        if d.type == "text":
            return self._chunk({"content": d.text}) if d.text else b""
        if d.type == "reasoning":
            return self._chunk({"reasoning_content": d.text}) if d.text else b""
        if d.type == "tool_call_start":
            return self._chunk(
                {
                    "tool_calls": [
                        {
                            "index": d.index,
                            "id": d.id,
                            "type": "function",
                            "function": {"name": d.name, "arguments": ""},
                        }
                    ]
                }
            )
        if not d.arguments:
            return b""
        return self._chunk(
            {"tool_calls": [{"index": d.index, "function": {"arguments": d.arguments}}]}
        )

    def finish(self, completion: Completion) -> bytes:
        """The finish_reason chunk (with all logprobs when asked), usage chunk, ``[DONE]``.

        Deltas do not map to tokens, so a stream's logprobs ride on its last chunk.
        """
        out = self._chunk(
            {}, finish_reason(completion.finish_reason), _logprobs(completion, self.ctx)
        )
        if self.ctx.include_usage:
            out += self._frame([], _usage(completion.usage))
        return out + DONE

    def error(self, err: ApiError) -> bytes:
        """An in-band ``{"error": {...}}`` chunk (the SDKs raise on it), then ``[DONE]``."""
        return frame(orjson.dumps({"error": error_object(err)})) + DONE
