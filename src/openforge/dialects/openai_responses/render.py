"""Canonical :class:`Completion` -> Responses JSON and stream events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from openforge.conversation import Completion, CompletionDelta, ToolCall, Usage
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_chat.errors import STATUS, error_object
from openforge.dialects.openai_responses.compaction import compaction_item
from openforge.dialects.openai_responses.computer import (
    COMPUTER,
    METADATA_KEY,
    call_action,
    is_batch,
)
from openforge.dialects.openai_responses.protocol import (
    CompactionOut,
    ComputerCallOut,
    FunctionCallOut,
    LogprobOut,
    MessageOut,
    OutputItem,
    OutputTextOut,
    ReasoningOut,
    ResponseOut,
    StreamEvent,
    usage_out,
)
from openforge.dialects.sse import frame

__all__ = ["ResponsesStreamEncoder", "render_response"]


def _item_id(ctx: ResponseContext, prefix: str, index: int) -> str:
    # Item ids derive from the response id: unique per call, stable, no randomness here.
    return f"{prefix}_{ctx.response_id.removeprefix('resp_')}_{index}"


def _logprobs(completion: Completion, ctx: ResponseContext) -> list[LogprobOut]:
    if not ctx.logprobs:
        return []
    return [
        {"token": t, "bytes": list(t.encode()), "logprob": lp, "top_logprobs": []}
        for t, lp in ctx.sampled_tokens(completion)
    ]


def _echo_tools(ctx: ResponseContext) -> list[dict[str, Any]]:
    conv = ctx.conversation
    if conv is None:
        return []
    computer = conv.metadata.get(METADATA_KEY)
    return [
        computer
        if computer is not None and t.name == COMPUTER
        else {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": t.parameters,
        }
        for t in conv.tools
    ]


def _is_computer(ctx: ResponseContext, name: str) -> bool:
    """Whether a call of ``name`` is a computer action (answered as a ``computer_call``)."""
    conv = ctx.conversation
    return name == COMPUTER and conv is not None and METADATA_KEY in conv.metadata


def _response(
    ctx: ResponseContext,
    status: str,
    output: list[OutputItem],
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
) -> ResponseOut:
    """The response object, echoing the request's settings as OpenAI does."""
    conv = ctx.conversation
    meta = conv.metadata if conv is not None else {}
    choice: Any = "auto"
    if conv is not None:
        tc = conv.tool_choice
        choice = {"type": "function", "name": tc.name} if tc.name else tc.mode
    return {
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": meta.get("instructions"),
        "max_output_tokens": conv.params.max_tokens if conv is not None else None,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": conv.parallel_tool_calls if conv is not None else True,
        "previous_response_id": meta.get("previous_response_id"),
        "reasoning": meta.get("reasoning"),
        "store": bool(meta.get("store", False)),
        "temperature": conv.params.temperature if conv is not None else None,
        "text": meta.get("text") or {"format": {"type": "text"}},
        "tool_choice": choice,
        "tools": _echo_tools(ctx),
        "top_p": conv.params.top_p if conv is not None else None,
        "truncation": "disabled",
        "usage": usage_out(usage) if usage is not None else None,
        "user": meta.get("user"),
        "metadata": meta.get("metadata") or {},
    }


def _reasoning_item(ctx: ResponseContext, index: int, text: str, status: str) -> ReasoningOut:
    return {
        "id": _item_id(ctx, "rs", index),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}] if text else [],
        "encrypted_content": None,
        "status": status,
    }


def _text_part(text: str, logprobs: list[LogprobOut]) -> OutputTextOut:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}


def _message_item(
    ctx: ResponseContext, index: int, parts: list[OutputTextOut], status: str
) -> MessageOut:
    return {
        "id": _item_id(ctx, "msg", index),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": parts,
    }


def _computer_item(
    ctx: ResponseContext, index: int, call_id: str, arguments: str, status: str
) -> ComputerCallOut:
    item: ComputerCallOut = {
        "id": _item_id(ctx, "cu", index),
        "type": "computer_call",
        "call_id": call_id,
        "pending_safety_checks": [],
        "status": status,
    }
    declared = ctx.conversation.metadata[METADATA_KEY] if ctx.conversation else {}
    action = call_action(arguments)
    if is_batch(declared):
        batch = action.get("actions")
        item["actions"] = (
            [a for a in batch if isinstance(a, dict)] if isinstance(batch, list) else []
        )
    else:
        item["action"] = action
    return item


def _call_item(
    ctx: ResponseContext, index: int, call_id: str, name: str, arguments: str, status: str
) -> FunctionCallOut | ComputerCallOut:
    if _is_computer(ctx, name):
        return _computer_item(ctx, index, call_id, arguments, status)
    item: FunctionCallOut = {
        "id": _item_id(ctx, "fc", index),
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
    }
    namespaced = ctx.conversation.metadata.get("tool_namespaces", {}) if ctx.conversation else {}
    split = namespaced.get(name)
    if split is not None:  # Codex dispatches a namespaced tool by (namespace, name)
        item["namespace"], item["name"] = split
    return item


def _status(completion: Completion) -> str:
    return "incomplete" if completion.finish_reason == "length" else "completed"


def _compacting(ctx: ResponseContext) -> bool:
    """Whether the request asked for a compaction (answered with one ``compaction``
    item: the summary's text, reasoning and any tool call stay on the call's record)."""
    return ctx.conversation is not None and ctx.conversation.compact is not None


def render_response(completion: Completion, ctx: ResponseContext) -> bytes:
    """The JSON body of a non-streaming response object."""
    output: list[OutputItem] = []
    if _compacting(ctx):
        output.append(compaction_item(ctx, 0, completion.text))
        return orjson.dumps(_response(ctx, _status(completion), output, completion.usage))
    if completion.reasoning:
        output.append(_reasoning_item(ctx, len(output), completion.reasoning, "completed"))
    if completion.text:
        part = _text_part(completion.text, _logprobs(completion, ctx))
        output.append(_message_item(ctx, len(output), [part], "completed"))
    for call in completion.tool_calls:
        output.append(_call_item(ctx, len(output), call.id, call.name, call.arguments, "completed"))
    return orjson.dumps(_response(ctx, _status(completion), output, completion.usage))


@dataclass(slots=True)
class ResponsesStreamEncoder:
    """Stream state for one Responses stream; ``sequence_number`` is stamped in ``_emit``.

    Order: ``response.created``, ``response.in_progress``, then per output item
    ``output_item.added`` → (``content_part.added`` → ``*.delta``… → ``*.done`` →
    ``content_part.done``) or (``function_call_arguments.delta``… → ``.done``) →
    ``output_item.done``; then ``response.completed`` (or ``response.incomplete`` when
    the length limit cut the answer, or ``response.failed`` from :meth:`error`).
    """

    ctx: ResponseContext
    _seq: int = 0
    _output: list[OutputItem] = field(default_factory=list)
    # "reasoning" | "message" | "function_call" | "computer_call" | "compaction"
    _open: str | None = None
    _buf: list[str] = field(default_factory=list)
    _call: ToolCall | None = None

    def _emit(self, *events: StreamEvent) -> bytes:
        out = b""
        for event in events:
            event["sequence_number"] = self._seq
            self._seq += 1
            out += frame(orjson.dumps(event), event["type"])
        return out

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        resp = _response(self.ctx, "in_progress", [])
        return self._emit(
            {"type": "response.created", "sequence_number": 0, "response": resp},
            {"type": "response.in_progress", "sequence_number": 0, "response": resp},
        )

    def _added(self, item: OutputItem) -> StreamEvent:
        return {"type": "response.output_item.added", "output_index": self._index, "item": item}

    @property
    def _index(self) -> int:
        return len(self._output)

    def _part_event(self, kind: str, part: Any) -> StreamEvent:
        return {
            "type": kind,
            "item_id": self._open_id,
            "output_index": self._index,
            "content_index": 0,
            "part": part,
        }

    @property
    def _open_id(self) -> str:
        prefix = {
            "reasoning": "rs",
            "message": "msg",
            "function_call": "fc",
            "computer_call": "cu",
        }[self._open or ""]
        return _item_id(self.ctx, prefix, self._index)

    def _begin(self, kind: str, item: OutputItem, part: Any = None) -> bytes:
        out = self._close()
        self._open = kind
        events = [self._added(item)]
        if part is not None:
            events.append(self._part_event("response.content_part.added", part))
        return out + self._emit(*events)

    def _text_delta(self, kind: str, text: str) -> bytes:
        self._buf.append(text)
        event: StreamEvent = {
            "type": kind,
            "item_id": self._open_id,
            "output_index": self._index,
            "content_index": 0,
            "delta": text,
        }
        if kind == "response.output_text.delta":
            event["logprobs"] = []
        return self._emit(event)

    def _compaction_delta(self, d: CompletionDelta) -> bytes:
        """A compaction streams no content: its item is announced with the first text of
        the summary, and each later piece is a ``response.compaction.compacting`` event."""
        if d.type != "text" or not d.text:
            return b""
        out = b""
        item_id = _item_id(self.ctx, "cmp", 0)
        if self._open != "compaction":
            self._open = "compaction"
            added: CompactionOut = {"id": item_id, "type": "compaction", "encrypted_content": ""}
            out = self._emit(self._added(added))
        event: StreamEvent = {
            "type": "response.compaction.compacting",
            "item_id": item_id,
            "output_index": 0,
        }
        return out + self._emit(event)

    def _compaction_done(self, completion: Completion) -> bytes:
        item = compaction_item(self.ctx, 0, completion.text)
        out = b"" if self._open == "compaction" else self._emit(self._added(item))
        self._open = None
        self._output.append(item)
        return out + self._emit(
            {"type": "response.output_item.done", "output_index": 0, "item": item}
        )

    def delta(self, d: CompletionDelta) -> bytes:
        """The events for ``d``, opening and closing output items as needed."""
        ctx = self.ctx
        if _compacting(ctx):
            return self._compaction_delta(d)
        if d.type == "reasoning":
            if not d.text:
                return b""
            out = b""
            if self._open != "reasoning":
                out = self._close()
                out += self._begin(
                    "reasoning",
                    _reasoning_item(ctx, self._index, "", "in_progress"),
                    {"type": "reasoning_text", "text": ""},
                )
            return out + self._text_delta("response.reasoning_text.delta", d.text)
        if d.type == "text":
            if not d.text:
                return b""
            out = b""
            if self._open != "message":
                out = self._close()
                out += self._begin(
                    "message",
                    _message_item(ctx, self._index, [], "in_progress"),
                    _text_part("", []),
                )
            return out + self._text_delta("response.output_text.delta", d.text)
        if d.type == "tool_call_start":
            out = self._close()
            self._call = ToolCall(d.id, d.name, "")
            if _is_computer(ctx, d.name):
                # A computer call is one event pair, sent whole when its action is known.
                self._open = "computer_call"
                return out
            call = _call_item(ctx, self._index, d.id, d.name, "", "in_progress")
            return out + self._begin("function_call", call)
        if self._open not in ("function_call", "computer_call") or not d.arguments:
            return b""
        self._buf.append(d.arguments)
        if self._open == "computer_call":
            return b""
        return self._emit(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": self._open_id,
                "output_index": self._index,
                "delta": d.arguments,
            }
        )

    def _close(self, logprobs: list[LogprobOut] | None = None) -> bytes:
        if self._open is None:
            return b""
        text = "".join(self._buf)
        ctx, i, item_id = self.ctx, self._index, self._open_id
        events: list[StreamEvent] = []
        item: OutputItem
        if self._open == "reasoning":
            part: Any = {"type": "reasoning_text", "text": text}
            events.append(
                {
                    "type": "response.reasoning_text.done",
                    "item_id": item_id,
                    "output_index": i,
                    "content_index": 0,
                    "text": text,
                }
            )
            events.append(self._part_event("response.content_part.done", part))
            item = _reasoning_item(ctx, i, text, "completed")
        elif self._open == "message":
            part = _text_part(text, logprobs or [])
            events.append(
                {
                    "type": "response.output_text.done",
                    "item_id": item_id,
                    "output_index": i,
                    "content_index": 0,
                    "text": text,
                    "logprobs": logprobs or [],
                }
            )
            events.append(self._part_event("response.content_part.done", part))
            item = _message_item(ctx, i, [part], "completed")
        elif self._open == "computer_call":
            call = self._call or ToolCall("", "", "")
            events.append(self._added(_computer_item(ctx, i, call.id, text, "in_progress")))
            item = _computer_item(ctx, i, call.id, text, "completed")
        else:
            call = self._call or ToolCall("", "", "")
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item_id,
                    "output_index": i,
                    "arguments": text,
                }
            )
            item = _call_item(ctx, i, call.id, call.name, text, "completed")
        events.append({"type": "response.output_item.done", "output_index": i, "item": item})
        out = self._emit(*events)
        self._output.append(item)
        self._open, self._call = None, None
        self._buf.clear()
        return out

    def finish(self, completion: Completion) -> bytes:
        """Close the open item, then ``response.completed`` (or ``.incomplete``) with usage."""
        logprobs = _logprobs(completion, self.ctx)
        compacting = _compacting(self.ctx)
        out = self._compaction_done(completion) if compacting else self._close(logprobs)
        for item in self._output:
            if item["type"] == "message" and logprobs:
                item["content"][0]["logprobs"] = logprobs
        status = _status(completion)
        resp = _response(self.ctx, status, self._output, completion.usage)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._emit({"type": kind, "response": resp})

    def error(self, err: ApiError) -> bytes:
        """``response.failed`` carrying ``{code, message}`` (Codex maps the code)."""
        obj = error_object(err)
        error = {"code": STATUS[err.kind][2] or "server_error", "message": obj["message"]}
        resp = _response(self.ctx, "failed", self._output, error=error)
        return self._emit({"type": "response.failed", "response": resp})
