"""Canonical :class:`Completion` -> Anthropic Message JSON and stream events."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from openforge.conversation import Completion, CompletionDelta, FinishReason
from openforge.dialects.anthropic.errors import error_event
from openforge.dialects.anthropic.protocol import (
    BlockOut,
    ContentBlockDelta,
    MessageOut,
    StreamEvent,
    TokenCount,
    ToolUseOut,
    UsageOut,
)
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.sse import frame

__all__ = [
    "AnthropicStreamEncoder",
    "render_count_tokens",
    "render_response",
    "stop_reason",
    "tool_input",
]

log = logging.getLogger(__name__)
# No signing key exists here: thinking blocks carry an empty signature, which clients
# store and send back unchanged.
SIGNATURE = ""


def stop_reason(reason: FinishReason, stop_sequence: str | None = None) -> str:
    """The wire ``stop_reason`` for a canonical finish reason."""
    if reason == "tool_calls":
        return "tool_use"
    if reason == "length":
        return "max_tokens"
    return "stop_sequence" if stop_sequence else "end_turn"


def tool_input(arguments: str) -> tuple[dict[str, Any], bool]:
    """A tool call's JSON text as the ``input`` object, and whether it was valid.

    Models under training emit broken JSON; Anthropic's ``input`` must be an object,
    so text that is not a JSON object becomes ``{}`` (the harness then reports the
    missing arguments to the model as a tool error, a model mistake, not a crash).
    """
    if not arguments.strip():
        return {}, True
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}, False
    return (value, True) if isinstance(value, dict) else ({}, False)


def _tool_use(ctx: ResponseContext, call_id: str, name: str, value: dict[str, Any]) -> ToolUseOut:
    """A ``tool_use`` block; a member of a defined toolset names its toolset, as
    Anthropic's own blocks do (the SDK reads ``left_click`` of ``computer`` by it)."""
    block: ToolUseOut = {"type": "tool_use", "id": call_id, "name": name, "input": value}
    toolsets = ctx.conversation.metadata.get("toolsets") if ctx.conversation else None
    if toolsets and name in toolsets:
        block["toolset_name"] = toolsets[name]
    return block


def _usage(input_tokens: int, output_tokens: int) -> UsageOut:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }


def render_response(
    completion: Completion, ctx: ResponseContext, *, stop_sequence: str | None = None
) -> bytes:
    """The JSON body of a non-streaming Message; ``stop_sequence`` names a matched stop.

    Without ``stop_sequence``, the completion's own ``stop_sequence`` is reported.
    """
    stop_sequence = stop_sequence or completion.stop_sequence
    content: list[BlockOut] = []
    if completion.reasoning:
        content.append(
            {"type": "thinking", "thinking": completion.reasoning, "signature": SIGNATURE}
        )
    if completion.text:
        content.append({"type": "text", "text": completion.text})
    for call in completion.tool_calls:
        value, ok = tool_input(call.arguments)
        if not ok:
            log.warning("tool call %s: arguments are not a JSON object; sent {}", call.id)
        content.append(_tool_use(ctx, call.id, call.name, value))
    body: MessageOut = {
        "id": ctx.response_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": ctx.model,
        "stop_reason": stop_reason(completion.finish_reason, stop_sequence),
        "stop_sequence": stop_sequence,
        "usage": _usage(completion.usage.prompt_tokens, completion.usage.completion_tokens),
    }
    return orjson.dumps(body)


def render_count_tokens(input_tokens: int) -> bytes:
    """The ``/v1/messages/count_tokens`` answer."""
    body: TokenCount = {"input_tokens": input_tokens}
    return orjson.dumps(body)


BlockKind = Literal["text", "thinking", "tool_use"]


@dataclass(slots=True)
class AnthropicStreamEncoder:
    """Stream state for one Messages stream, strictly ordered per the docs.

    ``message_start``, ``ping``, then per block ``content_block_start`` /
    ``content_block_delta``… / ``content_block_stop``, then ``message_delta`` and
    ``message_stop``. A tool call's arguments are buffered and sent as one
    ``input_json_delta`` when its block closes, after checking they form a JSON object
    (else ``{}``, counted in ``invalid_tool_arguments``): a client's partial-JSON
    accumulator must never see text that cannot parse.
    """

    ctx: ResponseContext
    invalid_tool_arguments: int = 0
    _index: int = -1
    _open: BlockKind | None = None
    _args: list[str] = field(default_factory=list)

    def _emit(self, *events: StreamEvent) -> bytes:
        return b"".join(frame(orjson.dumps(e), e["type"]) for e in events)

    def start(self) -> bytes:
        """``message_start`` (empty content, prompt usage) and a ``ping``."""
        message: MessageOut = {
            "id": self.ctx.response_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.ctx.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(self.ctx.prompt_tokens, 0),
        }
        return self._emit({"type": "message_start", "message": message}, {"type": "ping"})

    def _open_block(self, block: BlockOut) -> bytes:
        out = self._close_block()
        self._index += 1
        self._open = block["type"]
        return out + self._emit(
            {"type": "content_block_start", "index": self._index, "content_block": block}
        )

    def _delta(self, delta: Any) -> bytes:
        event: ContentBlockDelta = {
            "type": "content_block_delta",
            "index": self._index,
            "delta": delta,
        }
        return self._emit(event)

    def _close_block(self) -> bytes:
        out = b""
        if self._open == "thinking":
            out = self._delta({"type": "signature_delta", "signature": SIGNATURE})
        elif self._open == "tool_use":
            text = "".join(self._args)
            self._args.clear()
            value, ok = tool_input(text)
            if not ok:
                self.invalid_tool_arguments += 1
                log.warning("streamed tool call: arguments are not a JSON object; sent {}")
            partial = text if ok and text.strip() else orjson.dumps(value).decode()
            out = self._delta({"type": "input_json_delta", "partial_json": partial})
        if self._open is not None:
            out += self._emit({"type": "content_block_stop", "index": self._index})
            self._open = None
        return out

    def delta(self, d: CompletionDelta) -> bytes:
        """The events for ``d``, opening and closing content blocks as needed."""
        if d.type == "text":
            if not d.text:
                return b""
            out = b"" if self._open == "text" else self._open_block({"type": "text", "text": ""})
            return out + self._delta({"type": "text_delta", "text": d.text})
        if d.type == "reasoning":
            if not d.text:
                return b""
            out = b""
            if self._open != "thinking":
                out = self._open_block({"type": "thinking", "thinking": "", "signature": ""})
            return out + self._delta({"type": "thinking_delta", "thinking": d.text})
        if d.type == "tool_call_start":
            return self._open_block(_tool_use(self.ctx, d.id, d.name, {}))
        if self._open == "tool_use":
            self._args.append(d.arguments)
        return b""

    def finish(self, completion: Completion, *, stop_sequence: str | None = None) -> bytes:
        """Close the open block, then ``message_delta`` (stop reason, usage), ``message_stop``."""
        stop_sequence = stop_sequence or completion.stop_sequence
        out = self._close_block()
        return out + self._emit(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": stop_reason(completion.finish_reason, stop_sequence),
                    "stop_sequence": stop_sequence,
                },
                "usage": {
                    "output_tokens": completion.usage.completion_tokens,
                    "input_tokens": completion.usage.prompt_tokens,
                },
            },
            {"type": "message_stop"},
        )

    def error(self, err: ApiError) -> bytes:
        """An in-band ``event: error`` (the SDKs raise the matching APIStatusError)."""
        return self._emit(error_event(err))
