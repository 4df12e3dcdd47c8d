"""Anthropic Messages request -> canonical :class:`Conversation`."""

from __future__ import annotations

from dataclasses import dataclass

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
from openforge.dialects.anthropic.defined import defined_spec
from openforge.dialects.anthropic.protocol import (
    VENDOR_BLOCK_TYPES,
    Base64Source,
    ContentBlock,
    CountTokensRequest,
    CustomTool,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    OtherBlock,
    RedactedThinkingBlock,
    ServerTool,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolsetTool,
    ToolUseBlock,
)
from openforge.dialects.anthropic.toolsets import toolset_specs
from openforge.dialects.errors import ApiError, decode_body
from openforge.dialects.images import image_from_base64, image_from_url
from openforge.dialects.prefix import (
    BodyMemo,
    KnownMember,
    Parsed,
    indexed,
    messages_of,
    parse_body,
)
from openforge.dialects.toolids import SCOPE_LAST_TURN, ToolIdWords, check_tool_ids

__all__ = ["parse_count_tokens_request", "parse_request"]

_TAGS = frozenset(
    {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "other"}
    | {"custom", "defined", "toolset", "server", "base64", "url"}
)


def parse_request(body: bytes, memo: BodyMemo | None = None) -> Conversation:
    """Parse a ``POST /v1/messages`` body.

    ``metadata`` carries the client's ``metadata``, ``thinking`` (as sent), and counts
    ``ignored_blocks`` (redacted thinking, which has nothing readable to render) and
    ``tool_errors`` (tool results flagged ``is_error``). Refused, naming the field (as
    Anthropic refuses them, or as blocks this gateway cannot show the model): no
    messages; a block type the API does not have, or one it has that cannot be rendered
    (documents, server tool results); a block in a role that cannot hold it; a tool
    result that answers no ``tool_use`` of the previous assistant turn, a ``tool_use`` id
    used twice or answered twice; a ``tool_choice`` naming no offered tool; ``thinking``
    enabled without a ``budget_tokens`` of at least 1024.
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


@dataclass(frozen=True, slots=True)
class _Served:
    """What a request's ``tools`` became: the tools served, the names of the ignored
    (server) ones, and ``(member, toolset)`` for each member of a defined toolset."""

    specs: tuple[ToolSpec, ...]
    ignored: tuple[str, ...]
    toolsets: tuple[tuple[str, str], ...]


def _tools(req: CountTokensRequest) -> _Served:
    """The tools served (custom tools, and Anthropic-defined tools and toolsets as
    :func:`defined_spec` and :func:`toolset_specs` render them), and the others.

    Two tools of one name are refused, as Anthropic refuses them: a call could not say
    which one it meant."""
    specs: list[ToolSpec] = []
    ignored: list[str] = []
    toolsets: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, ServerTool):
            ignored.append(tool.name or tool.type)
            continue
        if isinstance(tool, CustomTool):
            new: tuple[ToolSpec, ...] = (
                ToolSpec(tool.name, tool.description or "", tool.input_schema),
            )
        elif isinstance(tool, ToolsetTool):
            toolset, new = toolset_specs(tool, f"tools[{i}]")
            toolsets += [(spec.name, toolset) for spec in new]
        else:
            new = (defined_spec(tool, f"tools[{i}]"),)
        for spec in new:
            if spec.name in seen:
                raise ApiError(
                    "invalid_request",
                    f"tools: Tool names must be unique ('{spec.name}' is given twice).",
                    f"tools[{i}]",
                )
            seen.add(spec.name)
            specs.append(spec)
    return _Served(tuple(specs), tuple(ignored), tuple(toolsets))


# Harnesses send the same tools on every call: validated and converted once per process.
_TOOLS: KnownMember[MessagesRequest, _Served] = KnownMember("tools", lambda req: req.tools, _tools)


def _conversation(
    req: CountTokensRequest,
    items: list[Parsed],
    tools: _Served,
) -> Conversation:
    messages: list[Message] = []
    if req.system:
        system = [req.system] if isinstance(req.system, str) else [b.text for b in req.system]
        messages.append(Message("system", [TextPart(t) for t in system]))
    if not items:
        raise ApiError("invalid_request", "messages: at least one message is required.", "messages")
    check_tool_ids(indexed(items), _WORDS, SCOPE_LAST_TURN)
    _check_thinking(req)
    messages += messages_of(items)
    counts = {"ignored_blocks": 0, "tool_errors": 0}
    for item in items:
        for name, n in item.counts:
            counts[name] += n
    metadata: dict[str, object] = {k: v for k, v in counts.items() if v}
    if req.thinking is not None:
        metadata["thinking"] = req.thinking.model_dump(exclude_none=True)
    if tools.toolsets:
        metadata["toolsets"] = dict(tools.toolsets)
    choice, parallel = _tool_choice(req.tool_choice, tools)
    return Conversation(
        messages=messages,
        tools=tools.specs,
        tool_choice=choice,
        parallel_tool_calls=parallel,
        model=req.model,
        reasoning=req.thinking is not None and req.thinking.type != "disabled",
        ignored_tools=list(tools.ignored),
        metadata=metadata,
    )


# Anthropic's refusals of unpaired tool ids (its own wording).
_WORDS = ToolIdWords(
    orphan=(
        "messages.{where}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
        "{call_id}. Each `tool_result` block must have a corresponding `tool_use` block in "
        "the previous message.",
        "messages[{where}].content",
    ),
    duplicate_call=(
        "messages.{where}.content: `tool_use` ids must be unique ({call_id} is used twice).",
        "messages[{where}].content",
    ),
    duplicate_result=(
        "messages.{where}.content: `tool_result` for {call_id} is given twice; each "
        "`tool_use` takes one result.",
        "messages[{where}].content",
    ),
)


def _check_thinking(req: CountTokensRequest) -> None:
    """``thinking`` enabled needs its budget (its lower bound is the protocol model's)."""
    thinking = req.thinking
    if thinking is not None and thinking.type == "enabled" and thinking.budget_tokens is None:
        raise ApiError(
            "invalid_request",
            "thinking.budget_tokens: Field required when thinking is enabled (at least 1024).",
            "thinking.budget_tokens",
        )


def _tool_choice(choice: ToolChoice | None, tools: _Served) -> tuple[CanonicalToolChoice, bool]:
    if choice is None:
        return CanonicalToolChoice(), True
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "any":
        return CanonicalToolChoice("required"), parallel
    if choice.type == "tool":
        names = [t.name for t in tools.specs] + list(tools.ignored)
        if choice.name is None or choice.name not in names:
            offered = ", ".join(repr(n) for n in names) or "none"
            raise ApiError(
                "invalid_request",
                f"tool_choice.name: tool {choice.name!r} is not one of the tools offered "
                f"(offered: {offered}).",
                "tool_choice.name",
            )
        return CanonicalToolChoice("required", choice.name), parallel
    return CanonicalToolChoice(choice.type), parallel


def _refuse_block(block: ContentBlock, role: str, where: str) -> ApiError:
    """The refusal of a block this gateway cannot put in the prompt (never dropped: the
    model would answer a conversation other than the one sent)."""
    kind = block.type
    if kind not in VENDOR_BLOCK_TYPES:
        message = f"{where}.type: '{kind}' is not a content block type."
    elif isinstance(block, OtherBlock):
        message = (
            f"{where}: '{kind}' blocks are not supported by this gateway (it cannot show "
            "them to the model)."
        )
    else:
        message = f"{where}: a '{kind}' block cannot be in a {role} message."
    return ApiError("invalid_request", message, f"{where}.type")


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
        return [_assistant(msg.content, counts, where)]
    out: list[Message] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(msg.content):
        if isinstance(block, TextBlock) or (isinstance(block, ImageBlock) and msg.role == "user"):
            parts.append(_part(block, f"{where}.content[{j}]"))
        elif isinstance(block, ToolResultBlock) and msg.role == "user":
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
            raise _refuse_block(block, msg.role, f"{where}.content[{j}]")
    if parts or not out:
        out.append(Message(msg.role, parts))
    return out


def _assistant(blocks: list[ContentBlock], counts: dict[str, int], where: str) -> Message:
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, ToolUseBlock):
            calls.append(ToolCall(block.id, block.name, orjson.dumps(block.input).decode()))
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlock):
            # Encrypted reasoning: nothing readable to render (the gateway never makes
            # one; a transcript from Anthropic's API may hold some). Counted.
            counts["ignored_blocks"] += 1
        else:
            raise _refuse_block(block, "assistant", f"{where}.content[{j}]")
    return Message("assistant", parts, tool_calls=calls, reasoning="".join(reasoning) or None)
