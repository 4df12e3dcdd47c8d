"""Responses request -> canonical :class:`Conversation`."""

from __future__ import annotations

from typing import Any

import orjson

from openforge.conversation import (
    ContentPart,
    Conversation,
    Message,
    ResponseFormat,
    SamplingParams,
    Summary,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from openforge.dialects.errors import ApiError, load_body
from openforge.dialects.images import image_from_url
from openforge.dialects.openai_responses.compaction import (
    ENDPOINT,
    TRIGGER,
    input_message,
    instruction_message,
)
from openforge.dialects.openai_responses.computer import (
    COMPUTER,
    METADATA_KEY,
    action_arguments,
    computer_spec,
)
from openforge.dialects.openai_responses.protocol import (
    VENDOR_ITEM_TYPES,
    CompactionItem,
    CompactionTriggerItem,
    ComputerCallItem,
    ComputerCallOutputItem,
    ComputerTool,
    ComputerUsePreviewTool,
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
from openforge.dialects.prefix import (
    BodyMemo,
    KnownMember,
    Parsed,
    indexed,
    messages_of,
    parse_body,
)
from openforge.dialects.toolids import SCOPE_CONVERSATION, ToolIdWords, check_tool_ids

__all__ = [
    "LOGPROBS_INCLUDE",
    "TOOL_ID_WORDS",
    "flat_tool_name",
    "parse_compact_request",
    "parse_request",
]

LOGPROBS_INCLUDE = "message.output_text.logprobs"
_TAGS = frozenset(
    {"message", "function_call", "function_call_output", "reasoning", "other", "namespace"}
    | {"input_text", "output_text", "input_image", "refusal", "function"}
    | {"computer_call", "computer_call_output", "computer_use_preview", "computer"}
    | {"compaction", "compaction_trigger"}
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
    ``ignored_items`` (reasoning items with encrypted content only: nothing readable).
    Refused, naming the field (as OpenAI refuses them, or as items this gateway cannot
    show the model): an empty ``input``; an item type the API does not have, or one it
    has that cannot be rendered (``web_search_call``, ``local_shell_call``, …); a
    ``function_call_output`` answering no ``function_call`` (of this input or, with
    ``previous_response_id``, of the stored conversation: checked when it is resolved), a
    ``call_id`` used twice or answered twice; a ``tool_choice`` naming a function that
    ``tools`` does not offer. ``memo``: the rollout's last body (see
    :mod:`openforge.dialects.prefix`), whose input items this body may resend; only what
    follows them is parsed (never after an item a later one may still join), and the
    memo is updated.
    """
    req, items, (tools, ignored, namespaced, computer) = parse_body(
        body, memo, "input", ResponsesRequest, _TAGS, _request_items, _TOOLS
    )
    # A resent body's array holds only its new items: what it stands for is ``items``.
    if req.input == "" or (isinstance(req.input, list) and not items):
        raise ApiError("invalid_request", "Invalid value for 'input': it is empty.", "input")
    if req.previous_response_id is None:  # else checked with the stored conversation
        check_tool_ids(indexed(items), TOOL_ID_WORDS, SCOPE_CONVERSATION)
    _check_tool_choice(req.tool_choice, tools, namespaced)
    messages: list[Message] = []
    if req.instructions:
        messages.append(Message("system", [TextPart(req.instructions)]))
    if isinstance(req.input, str):
        messages.append(Message("user", [TextPart(req.input)]))
    summaries = _summaries(items, len(messages))
    messages += messages_of(items)
    ignored_items = sum(n for item in items for _, n in item.counts)
    metadata: dict[str, Any] = {
        k: getattr(req, k) for k in _EXTRAS + _MORE_EXTRAS if getattr(req, k) is not None
    }
    if computer is not None:
        metadata[METADATA_KEY] = computer.model_dump(exclude_none=True)
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
        tool_choice=_tool_choice(req.tool_choice, computer is not None),
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
        compact=TRIGGER if items and items[-1].note == TRIGGER else None,
        summaries=summaries,
    )


def _summaries(items: list[Parsed], first: int) -> list[Summary]:
    """The summaries ``items`` carry (their messages' indices counted from ``first``); a
    400 for a ``compaction_trigger`` that is not the final item."""
    out: list[Summary] = []
    at = first
    for i, item in enumerate(items):
        if item.note == TRIGGER and i != len(items) - 1:
            raise ApiError(
                "invalid_request",
                f"Invalid value for 'input[{i}]': a compaction_trigger must be the final "
                "input item.",
                f"input[{i}]",
            )
        if item.note is not None and item.note != TRIGGER:
            out.append(Summary(at, item.note))
        at += len(item.messages)
    return out


def parse_compact_request(body: bytes, memo: BodyMemo | None = None) -> Conversation:
    """Parse a ``POST /v1/responses/compact`` body as a Responses request (``model``,
    ``input``, ``instructions``, ``previous_response_id``; Codex also sends ``tools``,
    ``parallel_tool_calls``, ``reasoning`` and ``text``, which keep the prompt's tool list
    the rollout's) whose input ends with a ``compaction_trigger``; never streamed. The
    rollout's body memo is left alone: a compaction's body is parsed whole."""
    del memo  # not a resent response body
    data = load_body(body)
    given = data.get("input")
    if given == "" or (given is None and not data.get("previous_response_id")):
        raise ApiError("invalid_request", "Invalid value for 'input': it is empty.", "input")
    items: Any = given
    if isinstance(given, str):
        items = [{"type": "message", "role": "user", "content": given}]
    elif given is None:
        items = []
    if isinstance(items, list):  # anything else is refused by the parse, naming 'input'
        data["input"] = [*items, {"type": TRIGGER}]
    data.pop("stream", None)
    conversation = parse_request(orjson.dumps(data))
    conversation.compact = ENDPOINT
    return conversation


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


_Tools = tuple[
    tuple[ToolSpec, ...],
    tuple[str, ...],
    tuple[tuple[str, tuple[str, str]], ...],
    ComputerUsePreviewTool | ComputerTool | None,
]


def _tools(req: ResponsesRequest) -> _Tools:
    """Function tools (and the computer tool, as :func:`computer_spec` shows it), the
    names of ignored ones, ``(flat name, (namespace, name))`` of each namespaced one, and
    the ``computer_use_preview`` declaration if there is one.

    A flat name that collides with another tool's name is a 400 naming the field: the
    answer could not say which of the two was called.
    """
    tools: list[ToolSpec] = []
    ignored: list[str] = []
    namespaced: list[tuple[str, tuple[str, str]]] = []
    seen: dict[str, str] = {}
    computer: ComputerUsePreviewTool | ComputerTool | None = None

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

    def add_computer(tool: ComputerUsePreviewTool | ComputerTool, where: str) -> None:
        spec = computer_spec(tool)
        add(spec.name, where, spec.description, spec.parameters)

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
        elif isinstance(tool, ComputerUsePreviewTool | ComputerTool):
            if computer is not None:
                raise ApiError(
                    "invalid_request",
                    f"Invalid value for 'tools[{i}]': only one computer tool may be given.",
                    f"tools[{i}]",
                )
            computer = tool
            add_computer(tool, f"tools[{i}]")
        else:
            ignored.append(tool.name or tool.type)
    return tuple(tools), tuple(ignored), tuple(namespaced), computer


# Harnesses send the same tools on every call: validated and converted once per process.
_TOOLS = KnownMember("tools", lambda req: req.tools, _tools)


def _spec(name: str, description: Any, parameters: Any) -> ToolSpec:
    schema = parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}
    return ToolSpec(name, description if isinstance(description, str) else "", schema)


# Responses' refusals of unpaired call ids (OpenAI's wording); a message of the stored
# conversation has no index, and its param is the whole input.
TOOL_ID_WORDS = ToolIdWords(
    orphan=(
        "No tool call found for function call output with call_id {call_id}.",
        "input[{where}].call_id",
    ),
    duplicate_call=(
        "Duplicate 'call_id': {call_id} is the call_id of two function calls.",
        "input[{where}].call_id",
    ),
    duplicate_result=(
        "Duplicate 'call_id': the function call {call_id} has two outputs.",
        "input[{where}].call_id",
    ),
    unindexed_param="input",
)


def _check_tool_choice(
    choice: object,
    tools: tuple[ToolSpec, ...],
    namespaced: tuple[tuple[str, tuple[str, str]], ...],
) -> None:
    """A named function must be one of the function tools offered (flat or inner name)."""
    if not isinstance(choice, NamedToolChoice):
        return
    names = {t.name for t in tools} | {inner for _, (_, inner) in namespaced}
    if choice.name not in names:
        offered = ", ".join(repr(t.name) for t in tools) or "none"
        raise ApiError(
            "invalid_request",
            f"Invalid value for 'tool_choice.name': '{choice.name}' is not a function in "
            f"'tools' (offered: {offered}).",
            "tool_choice.name",
        )


def _tool_choice(choice: object, computer: bool) -> ToolChoice:
    forced = isinstance(choice, dict) and choice.get("type") in ("computer_use_preview", "computer")
    if computer and forced:
        return ToolChoice("required", COMPUTER)  # the hosted-tool choice that forces it
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
        if isinstance(item, CompactionItem | CompactionTriggerItem):
            made, note = (
                input_message(item, f"input[{i}]")
                if isinstance(item, CompactionItem)
                else (instruction_message(), TRIGGER)
            )
            messages.append(made)
            out.append(Parsed((made,), note=note))
            continue
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
    elif isinstance(item, ComputerCallItem):
        call = ToolCall(item.call_id, COMPUTER, action_arguments(item, where))
        _open_assistant(messages).tool_calls.append(call)
    elif isinstance(item, ComputerCallOutputItem):
        shot = item.output
        if shot.image_url is None:
            raise ApiError(
                "invalid_request",
                f"{where}.output: screenshots by file_id are not supported; send image_url.",
                f"{where}.output.image_url",
            )
        image = image_from_url(shot.image_url, f"{where}.output.image_url")
        messages.append(Message("tool", [image], tool_call_id=item.call_id))
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
        raise _refuse_item(item.type, where)
    return True


def _refuse_item(kind: str, where: str) -> ApiError:
    """The refusal of an item this gateway cannot put in the prompt (never dropped: the
    model would answer a conversation other than the one sent)."""
    if kind not in VENDOR_ITEM_TYPES:
        message = f"Invalid value for '{where}.type': '{kind}' is not an input item type."
    else:
        message = (
            f"Invalid value for '{where}.type': '{kind}' items are not supported by this "
            "gateway (it cannot show them to the model)."
        )
    return ApiError("invalid_request", message, f"{where}.type")
