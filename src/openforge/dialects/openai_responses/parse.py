"""Responses request -> canonical :class:`Conversation`."""

from __future__ import annotations

import logging
from typing import Any

from openforge.conversation import (
    ContentPart,
    Conversation,
    Message,
    ResponseFormat,
    SamplingParams,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from openforge.dialects.errors import ApiError
from openforge.dialects.images import image_from_url
from openforge.dialects.openai_responses.protocol import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputImage,
    InputItem,
    JsonObjectFormat,
    JsonSchemaFormat,
    MessageItem,
    NamedToolChoice,
    NamespaceTool,
    Part,
    ReasoningItem,
    Refusal,
    ResponsesRequest,
    TextConfig,
)
from openforge.dialects.prefix import BodyMemo, KnownMember, Parsed, messages_of, parse_body

__all__ = ["LOGPROBS_INCLUDE", "flat_tool_name", "parse_request"]

log = logging.getLogger(__name__)
LOGPROBS_INCLUDE = "message.output_text.logprobs"
_TAGS = frozenset(
    {"message", "function_call", "function_call_output", "reasoning", "other", "namespace"}
    | {"input_text", "output_text", "input_image", "refusal", "function"}
)
_EXTRAS = ("previous_response_id", "store", "include", "instructions", "client_metadata")
_MORE_EXTRAS = ("prompt_cache_key", "metadata", "user")


def parse_request(body: bytes, memo: BodyMemo | None = None) -> Conversation:
    """Parse a ``POST /v1/responses`` body.

    ``instructions`` becomes a leading system message. Function tools are served;
    function tools inside a ``namespace`` are served under their flat name
    (:func:`flat_tool_name`; ``metadata["tool_namespaces"]`` maps each flat name to its
    ``[namespace, name]`` so answers can split them again); every other tool type is
    listed in ``ignored_tools``. ``metadata`` keeps
    ``previous_response_id``, ``store``, ``include``, ``instructions``,
    ``client_metadata``, ``prompt_cache_key``, ``reasoning`` and item counts
    ``ignored_items``. ``memo``: the rollout's last body (see
    :mod:`openforge.dialects.prefix`), whose input items this body may resend; only what
    follows them is parsed (never after an item a later one may still join), and the
    memo is updated.
    """
    req, items, (tools, ignored, namespaced) = parse_body(
        body, memo, "input", ResponsesRequest, _TAGS, _request_items, _TOOLS
    )
    messages: list[Message] = []
    if req.instructions:
        messages.append(Message("system", [TextPart(req.instructions)]))
    if isinstance(req.input, str):
        messages.append(Message("user", [TextPart(req.input)]))
    messages += messages_of(items)
    ignored_items = sum(n for item in items for _, n in item.counts)
    metadata: dict[str, Any] = {
        k: getattr(req, k) for k in _EXTRAS + _MORE_EXTRAS if getattr(req, k) is not None
    }
    if namespaced:
        metadata["tool_namespaces"] = {flat: list(pair) for flat, pair in namespaced}
    if req.reasoning is not None:
        metadata["reasoning"] = req.reasoning.model_dump(exclude_none=True)
    if ignored_items:
        metadata["ignored_items"] = ignored_items
    if req.text is not None:  # echoed back in the answer's "text"
        metadata["text"] = req.text.model_dump(by_alias=True, exclude_none=True)
    want_logprobs = LOGPROBS_INCLUDE in (req.include or [])
    return Conversation(
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(req.tool_choice),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        params=SamplingParams(
            max_tokens=req.max_output_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            logprobs=want_logprobs,
            top_logprobs=(req.top_logprobs or 0) if want_logprobs else 0,
            response_format=_response_format(req.text),
        ),
        model=req.model,
        stream=bool(req.stream),
        reasoning=req.reasoning is not None and req.reasoning.effort not in ("none", "minimal"),
        ignored_tools=list(ignored),
        metadata=metadata,
    )


def _response_format(text: TextConfig | None) -> ResponseFormat | None:
    """``text.format`` as the canonical structured-output request (None for plain text)."""
    fmt = text.format if text is not None else None
    if isinstance(fmt, JsonObjectFormat):
        return ResponseFormat("json_object", param="text.format")
    if isinstance(fmt, JsonSchemaFormat):
        return ResponseFormat(
            "json_schema", fmt.json_schema, fmt.name, bool(fmt.strict), "text.format"
        )
    return None


def flat_tool_name(namespace: str, name: str) -> str:
    """The one name a namespaced tool has in the prompt: Codex's own flat form
    (``ToolName::canonical_flat_name``: ``mcp__task`` + ``notes_search`` →
    ``mcp__task__notes_search``), which is also the name Claude Code gives the same MCP
    tool, so a policy sees one name for one tool under either harness."""
    return f"{namespace.rstrip('_')}__{name.lstrip('_')}"


_Tools = tuple[tuple[ToolSpec, ...], tuple[str, ...], tuple[tuple[str, tuple[str, str]], ...]]


def _tools(req: ResponsesRequest) -> _Tools:
    """Function tools, the names of ignored ones, and ``(flat name, (namespace, name))``
    of each namespaced one.

    A flat name that collides with another tool's name is a 400 naming the field: the
    answer could not say which of the two was called.
    """
    tools: list[ToolSpec] = []
    ignored: list[str] = []
    namespaced: list[tuple[str, tuple[str, str]]] = []
    seen: dict[str, str] = {}

    def add(name: str, where: str, description: str | None, parameters: Any) -> None:
        if name in seen:
            raise ApiError(
                "invalid_request",
                f"Invalid value for '{where}.name': tool name '{name}' is also the name "
                f"of '{seen[name]}'.",
                f"{where}.name",
            )
        seen[name] = where
        tools.append(_spec(name, description, parameters))

    for i, tool in enumerate(req.tools or []):
        if isinstance(tool, FunctionTool):
            add(tool.name, f"tools[{i}]", tool.description, tool.parameters)
        elif isinstance(tool, NamespaceTool):
            for j, inner in enumerate(tool.tools):
                if isinstance(inner, FunctionTool):
                    flat = flat_tool_name(tool.name, inner.name)
                    add(flat, f"tools[{i}].tools[{j}]", inner.description, inner.parameters)
                    namespaced.append((flat, (tool.name, inner.name)))
                else:
                    ignored.append(f"{tool.name}/{inner.name or inner.type}")
        else:
            ignored.append(tool.name or tool.type)
    return tuple(tools), tuple(ignored), tuple(namespaced)


# Harnesses send the same tools on every call: validated and converted once per process.
_TOOLS = KnownMember("tools", lambda req: req.tools, _tools)


def _spec(name: str, description: Any, parameters: Any) -> ToolSpec:
    schema = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    return ToolSpec(name, description if isinstance(description, str) else "", schema)


def _tool_choice(choice: object) -> ToolChoice:
    if choice == "none":
        return ToolChoice("none")
    if choice == "required":
        return ToolChoice("required")
    if isinstance(choice, NamedToolChoice):
        return ToolChoice("required", choice.name)
    return ToolChoice()  # auto, or a hosted-tool / allowed_tools choice we do not serve


def _parts(content: str | list[Part], where: str, field: str = "content") -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[ContentPart] = []
    for j, part in enumerate(content):
        if isinstance(part, InputImage):
            if part.image_url is None:
                raise ApiError(
                    "invalid_request",
                    f"{where}.{field}[{j}]: images by file_id are not supported; send image_url.",
                    f"{where}.{field}[{j}].image_url",
                )
            parts.append(
                image_from_url(part.image_url, f"{where}.{field}[{j}].image_url", part.detail)
            )
        elif isinstance(part, Refusal):
            parts.append(TextPart(part.refusal))
        else:
            parts.append(TextPart(part.text))
    return parts


def _request_items(req: ResponsesRequest, kept: list[Parsed]) -> list[Parsed]:
    """``kept`` and what each input item after them added (none for a string input, which
    a split body never has: it is split at an item of an array)."""
    return kept if isinstance(req.input, str) else _items(req.input, kept)


def _items(items: list[InputItem], kept: list[Parsed]) -> list[Parsed]:
    """``kept`` (what a resent body's first items became) and what each of ``items``
    adds after them: its new messages, whether it was dropped, and whether a later item
    may still join the assistant message it leaves open."""
    out = list(kept)
    messages = messages_of(kept)
    for i, item in enumerate(items, start=len(kept)):
        before = len(messages)
        added = _add_item(messages, item, i)
        out.append(
            Parsed(
                tuple(messages[before:]),
                () if added else (("ignored_items", 1),),
                closed=not messages or messages[-1].role != "assistant",
            )
        )
    return out


def _open_assistant(messages: list[Message]) -> Message:
    """The assistant message a reasoning or function_call item belongs to."""
    if messages and messages[-1].role == "assistant":
        return messages[-1]
    messages.append(Message("assistant"))
    return messages[-1]


def _add_item(messages: list[Message], item: InputItem, i: int) -> bool:
    """Append ``item`` to ``messages``; False when it was dropped."""
    where = f"input[{i}]"
    if isinstance(item, MessageItem):
        parts = _parts(item.content, where)
        last = messages[-1] if messages else None
        if (
            item.role == "assistant"
            and last is not None
            and last.role == "assistant"
            and not last.content
            and not last.tool_calls
        ):
            last.content = parts  # the answer that followed its reasoning item
        else:
            messages.append(Message(item.role, parts))
    elif isinstance(item, FunctionCallItem):
        name = flat_tool_name(item.namespace, item.name) if item.namespace else item.name
        _open_assistant(messages).tool_calls.append(ToolCall(item.call_id, name, item.arguments))
    elif isinstance(item, FunctionCallOutputItem):
        messages.append(
            Message("tool", _parts(item.output, where, "output"), tool_call_id=item.call_id)
        )
    elif isinstance(item, ReasoningItem):
        texts = [c.text for c in item.content or []] or [s.text for s in item.summary]
        if not texts:
            return False  # encrypted only: nothing readable to render
        msg = messages[-1] if messages else None
        if msg is None or msg.role != "assistant" or msg.content or msg.tool_calls:
            messages.append(Message("assistant"))
            msg = messages[-1]
        msg.reasoning = (msg.reasoning or "") + "".join(texts)
    else:
        log.debug("dropped a %s input item", item.type)
        return False
    return True
