"""Anthropic Messages request -> canonical :class:`Conversation`."""

from __future__ import annotations

import logging

import orjson

from openforge.conversation import (
    ContentPart,
    Conversation,
    Message,
    SamplingParams,
    TextPart,
    ToolCall,
    ToolSpec,
)
from openforge.conversation import ToolChoice as CanonicalToolChoice
from openforge.dialects.anthropic.protocol import (
    Base64Source,
    ContentBlock,
    CountTokensRequest,
    CustomTool,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from openforge.dialects.errors import decode_body
from openforge.dialects.images import image_from_base64, image_from_url
from openforge.dialects.prefix import BodyMemo, KnownMember, Parsed, messages_of, parse_body

__all__ = ["parse_count_tokens_request", "parse_request"]

log = logging.getLogger(__name__)
_TAGS = frozenset(
    {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "other"}
    | {"custom", "server", "base64", "url"}
)


def parse_request(body: bytes, memo: BodyMemo | None = None) -> Conversation:
    """Parse a ``POST /v1/messages`` body.

    ``metadata`` carries the client's ``metadata``, ``thinking`` (as sent), and counts
    of what could not be rendered: ``ignored_blocks`` (documents, server tool results,
    redacted thinking) and ``tool_errors`` (tool results flagged ``is_error``).
    ``memo``: the rollout's last body (see :mod:`openforge.dialects.prefix`), whose
    messages this body may resend; only what follows them is parsed, and the memo is
    updated.
    """
    req, items, tools = parse_body(body, memo, "messages", MessagesRequest, _TAGS, _items, _TOOLS)
    conv = _conversation(req, items, tools)
    conv.params = SamplingParams(
        max_tokens=req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        stop=list(req.stop_sequences or []),
    )
    conv.stream = bool(req.stream)
    if req.metadata is not None:
        conv.metadata["metadata"] = req.metadata
    return conv


def parse_count_tokens_request(body: bytes) -> Conversation:
    """Parse a ``POST /v1/messages/count_tokens`` body (no ``max_tokens``)."""
    req = decode_body(body, CountTokensRequest, union_tags=_TAGS)
    return _conversation(req, [_element(m, i) for i, m in enumerate(req.messages)], _tools(req))


def _items(req: MessagesRequest, kept: list[Parsed]) -> list[Parsed]:
    """``kept`` and what each of the request's messages after them became."""
    n = len(kept)
    return kept + [_element(m, n + i) for i, m in enumerate(req.messages)]


def _element(msg: MessageParam, index: int) -> Parsed:
    """One wire message: the canonical messages it becomes, and what it left out."""
    counts = {"ignored_blocks": 0, "tool_errors": 0}
    out = _messages(msg, counts, f"messages[{index}]")
    return Parsed(tuple(out), tuple((k, v) for k, v in counts.items() if v))


def _tools(req: CountTokensRequest) -> tuple[tuple[ToolSpec, ...], tuple[str, ...]]:
    """The custom (client) tools served, and the names of the others (ignored)."""
    tools: list[ToolSpec] = []
    ignored: list[str] = []
    for tool in req.tools or []:
        if isinstance(tool, CustomTool):
            tools.append(ToolSpec(tool.name, tool.description or "", tool.input_schema))
        else:
            ignored.append(tool.name or tool.type)
    return tuple(tools), tuple(ignored)


# Harnesses send the same tools on every call: validated and converted once per process.
_TOOLS: KnownMember[MessagesRequest, tuple[tuple[ToolSpec, ...], tuple[str, ...]]] = KnownMember(
    "tools", lambda req: req.tools, _tools
)


def _conversation(
    req: CountTokensRequest,
    items: list[Parsed],
    tools: tuple[tuple[ToolSpec, ...], tuple[str, ...]],
) -> Conversation:
    messages: list[Message] = []
    if req.system:
        system = [req.system] if isinstance(req.system, str) else [b.text for b in req.system]
        messages.append(Message("system", [TextPart(t) for t in system]))
    messages += messages_of(items)
    counts = {"ignored_blocks": 0, "tool_errors": 0}
    for item in items:
        for name, n in item.counts:
            counts[name] += n
    metadata: dict[str, object] = {k: v for k, v in counts.items() if v}
    if req.thinking is not None:
        metadata["thinking"] = req.thinking.model_dump(exclude_none=True)
    choice, parallel = _tool_choice(req.tool_choice)
    return Conversation(
        messages=messages,
        tools=tools[0],
        tool_choice=choice,
        parallel_tool_calls=parallel,
        model=req.model,
        reasoning=req.thinking is not None and req.thinking.type != "disabled",
        ignored_tools=list(tools[1]),
        metadata=metadata,
    )


def _tool_choice(choice: ToolChoice | None) -> tuple[CanonicalToolChoice, bool]:
    if choice is None:
        return CanonicalToolChoice(), True
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "any":
        return CanonicalToolChoice("required"), parallel
    if choice.type == "tool":
        return CanonicalToolChoice("required", choice.name), parallel
    return CanonicalToolChoice(choice.type), parallel


def _part(block: TextBlock | ImageBlock, where: str) -> ContentPart:
    """A text or image block; an image is decoded and checked (``where``: its JSON path)."""
    if isinstance(block, TextBlock):
        return TextPart(block.text)
    src = block.source
    if isinstance(src, Base64Source):
        return image_from_base64(src.media_type, src.data, f"{where}.source.data")
    return image_from_url(src.url, f"{where}.source.url")


def _messages(msg: MessageParam, counts: dict[str, int], where: str) -> list[Message]:
    """One wire message -> canonical messages (tool results become ``tool`` messages)."""
    if isinstance(msg.content, str):
        return [Message(msg.role, [TextPart(msg.content)])]
    if msg.role == "assistant":
        return [_assistant(msg.content, counts)]
    out: list[Message] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(msg.content):
        if isinstance(block, TextBlock | ImageBlock):
            parts.append(_part(block, f"{where}.content[{j}]"))
        elif isinstance(block, ToolResultBlock):
            if parts:  # keep the order the client wrote
                out.append(Message(msg.role, parts))
                parts = []
            content = block.content
            result: list[ContentPart] = (
                [TextPart(content)]
                if isinstance(content, str)
                else [_part(b, f"{where}.content[{j}].content[{k}]") for k, b in enumerate(content)]
            )
            counts["tool_errors"] += block.is_error
            out.append(Message("tool", result, tool_call_id=block.tool_use_id))
        else:
            counts["ignored_blocks"] += 1
            log.debug("dropped a %s block in a %s message", block.type, msg.role)
    if parts or not out:
        out.append(Message(msg.role, parts))
    return out


def _assistant(blocks: list[ContentBlock], counts: dict[str, int]) -> Message:
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, ToolUseBlock):
            calls.append(ToolCall(block.id, block.name, orjson.dumps(block.input).decode()))
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        else:
            counts["ignored_blocks"] += 1
            if not isinstance(block, RedactedThinkingBlock):
                log.debug("dropped a %s block in an assistant message", block.type)
    return Message("assistant", parts, tool_calls=calls, reasoning="".join(reasoning) or None)
