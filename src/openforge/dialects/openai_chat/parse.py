"""Chat Completions request -> canonical :class:`Conversation`."""

from __future__ import annotations

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
from openforge.dialects.openai_chat.protocol import (
    MESSAGE_ROLES,
    AssistantMessage,
    ChatCompletionRequest,
    ChatMessage,
    FunctionTool,
    ImageContent,
    JsonObjectFormat,
    JsonSchemaFormat,
    NamedToolChoice,
    ResponseFormatParam,
    TextContent,
    ToolMessage,
    UserMessage,
)
from openforge.dialects.prefix import (
    BodyMemo,
    KnownMember,
    Parsed,
    indexed,
    messages_of,
    parse_body,
)
from openforge.dialects.toolids import SCOPE_CONVERSATION, ToolIdWords, check_tool_ids

__all__ = ["parse_request"]

_TAGS = MESSAGE_ROLES | {"text", "image_url", "refusal", "function", "other"}
_TAGS |= {"json_schema", "json_object"}  # response_format


def parse_request(body: bytes, memo: BodyMemo | None = None) -> Conversation:
    """Parse a ``POST /v1/chat/completions`` body.

    Raises ``ApiError("invalid_request")`` naming the field for malformed JSON, a
    missing or ill-typed field, ``n`` > 1, an unknown message role or content type, no
    messages, a tool message answering no earlier call, a call id used twice or answered
    twice, or a ``tool_choice`` naming a function that ``tools`` does not offer.
    ``metadata`` carries ``include_usage``, ``user``,
    ``reasoning_effort`` and the client's ``metadata`` when sent. ``memo``: the rollout's
    last body (see :mod:`openforge.dialects.prefix`), whose messages this body may
    resend; only what follows them is parsed, and the memo is updated.
    """
    req, items, (tools, ignored) = parse_body(
        body, memo, "messages", ChatCompletionRequest, _TAGS, _items, _TOOLS
    )
    messages = messages_of(items)
    if req.n is not None and req.n != 1:
        raise ApiError("invalid_request", "Only n=1 is supported.", "n")
    if not messages:
        raise ApiError("invalid_request", "'messages' must not be empty.", "messages")
    check_tool_ids(indexed(items), _WORDS, SCOPE_CONVERSATION)
    _check_tool_choice(req.tool_choice, tools)
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    params = SamplingParams(
        max_tokens=req.max_completion_tokens or req.max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=max(req.top_k or 0, 0),
        stop=stop,
        seed=req.seed,
        logprobs=bool(req.logprobs),
        top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
        response_format=_response_format(req.response_format),
    )
    metadata: dict[str, object] = {}
    if req.stream_options is not None and req.stream_options.include_usage:
        metadata["include_usage"] = True
    for key in ("user", "reasoning_effort", "metadata"):
        value = getattr(req, key)
        if value is not None:
            metadata[key] = value
    return Conversation(
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(req.tool_choice),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        params=params,
        model=req.model,
        stream=bool(req.stream),
        reasoning=req.reasoning_effort not in (None, "none", "minimal"),
        ignored_tools=list(ignored),
        metadata=metadata,
    )


def _tools(req: ChatCompletionRequest) -> tuple[tuple[ToolSpec, ...], tuple[str, ...]]:
    """The function tools served, and the names of the other tools (ignored)."""
    tools: list[ToolSpec] = []
    ignored: list[str] = []
    for tool in req.tools or []:
        if isinstance(tool, FunctionTool):
            fn = tool.function
            tools.append(ToolSpec(fn.name, fn.description or "", _schema(fn.parameters)))
        else:
            ignored.append(_name_of(tool.model_extra, tool.type))
    return tuple(tools), tuple(ignored)


# Harnesses send the same tools on every call: validated and converted once per process.
_TOOLS = KnownMember("tools", lambda req: req.tools, _tools)


def _items(req: ChatCompletionRequest, kept: list[Parsed]) -> list[Parsed]:
    """``kept`` and the request's messages after them, one canonical message each."""
    n = len(kept)
    return kept + [Parsed((_message(m, n + i),)) for i, m in enumerate(req.messages)]


def _response_format(fmt: ResponseFormatParam | None) -> ResponseFormat | None:
    """``response_format`` as the canonical structured-output request (None for text)."""
    if isinstance(fmt, JsonObjectFormat):
        return ResponseFormat("json_object", param="response_format")
    if isinstance(fmt, JsonSchemaFormat):
        spec = fmt.json_schema
        return ResponseFormat(
            "json_schema", spec.json_schema, spec.name, bool(spec.strict), "response_format"
        )
    return None


def _schema(parameters: dict[str, object] | None) -> dict[str, object]:
    return parameters if parameters is not None else {"type": "object", "properties": {}}


def _name_of(extra: dict[str, object] | None, fallback: str) -> str:
    inner = (extra or {}).get(fallback)
    if isinstance(inner, dict) and isinstance(inner.get("name"), str):
        return str(inner["name"])
    return fallback


# Chat Completions' refusals of unpaired tool ids (OpenAI's wording).
_WORDS = ToolIdWords(
    orphan=(
        "Invalid parameter: messages[{where}] has role 'tool' and tool_call_id '{call_id}', "
        "which answers no 'tool_calls' of an earlier assistant message.",
        "messages[{where}].tool_call_id",
    ),
    duplicate_call=(
        "Invalid parameter: duplicate tool call id '{call_id}' in messages[{where}]"
        ".tool_calls: each tool call needs its own id.",
        "messages[{where}].tool_calls",
    ),
    duplicate_result=(
        "Invalid parameter: duplicate value for 'tool_call_id' of '{call_id}' in "
        "messages[{where}]: that call was already answered.",
        "messages[{where}].tool_call_id",
    ),
)


def _check_tool_choice(choice: object, tools: tuple[ToolSpec, ...]) -> None:
    """A named function must be one of the function tools offered."""
    if isinstance(choice, NamedToolChoice) and all(t.name != choice.function.name for t in tools):
        offered = ", ".join(repr(t.name) for t in tools) or "none"
        raise ApiError(
            "invalid_request",
            f"Invalid value for 'tool_choice.function.name': '{choice.function.name}' is not "
            f"a function in 'tools' (offered: {offered}).",
            "tool_choice.function.name",
        )


def _tool_choice(choice: object) -> ToolChoice:
    if choice in ("auto", "none", "required"):
        return ToolChoice(mode=choice)
    if isinstance(choice, NamedToolChoice):
        return ToolChoice(mode="required", name=choice.function.name)
    # None, or a shape we do not serve (allowed_tools, custom): the model decides.
    return ToolChoice()


def _text_parts(content: str | list[TextContent]) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(content)]
    return [TextPart(p.text) for p in content]


def _message(msg: ChatMessage, index: int) -> Message:
    if isinstance(msg, UserMessage):
        if isinstance(msg.content, str):
            parts: list[ContentPart] = [TextPart(msg.content)]
        else:
            where = f"messages[{index}].content"
            parts = [
                image_from_url(p.image_url.url, f"{where}[{j}].image_url.url", p.image_url.detail)
                if isinstance(p, ImageContent)
                else TextPart(p.text)
                for j, p in enumerate(msg.content)
            ]
        return Message("user", parts, name=msg.name)
    if isinstance(msg, AssistantMessage):
        return _assistant(msg, index)
    if isinstance(msg, ToolMessage):
        return Message("tool", _text_parts(msg.content), tool_call_id=msg.tool_call_id)
    return Message(msg.role, _text_parts(msg.content), name=msg.name)


def _assistant(msg: AssistantMessage, index: int) -> Message:
    parts: list[ContentPart] = []
    if isinstance(msg.content, str):
        parts.append(TextPart(msg.content))
    elif msg.content is not None:
        parts.extend(TextPart(p.text) for p in msg.content if isinstance(p, TextContent))
    if not parts and msg.refusal:
        parts.append(TextPart(msg.refusal))
    calls = [ToolCall(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
    if not parts and not calls and msg.refusal is None:
        # An assistant turn with nothing in it would render as an empty turn the model
        # never produced; OpenAI rejects it too.
        raise ApiError(
            "invalid_request",
            f"messages[{index}].content: an assistant message needs 'content' or 'tool_calls'.",
            f"messages[{index}].content",
        )
    return Message(
        "assistant",
        parts,
        tool_calls=calls,
        name=msg.name,
        reasoning=msg.reasoning_content or msg.reasoning,
    )
