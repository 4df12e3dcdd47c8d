"""The canonical conversation every dialect parses into and renders from.

Dialects (OpenAI Chat, OpenAI Responses, Anthropic Messages) translate their wire
shapes to and from these types; rendering turns a :class:`Conversation` into prompt
token ids; engines never see any of it. Plain dataclasses keep the hot path cheap.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "Completion",
    "CompletionDelta",
    "ContentPart",
    "Conversation",
    "FinishReason",
    "ImagePart",
    "Message",
    "ReasoningDelta",
    "ResponseFormat",
    "Role",
    "SamplingParams",
    "Summary",
    "TextDelta",
    "TextPart",
    "ToolCall",
    "ToolCallArgumentsDelta",
    "ToolCallStart",
    "ToolChoice",
    "ToolSpec",
    "Usage",
    "assistant_message",
    "tools_json",
]

Role = Literal["system", "developer", "user", "assistant", "tool"]
# "tool_calls": the model asked for tools; "length": max tokens or context; "stop": EOS or a
# stop sequence; "abort": the client went away or the engine was cancelled; "error": the
# engine failed.
FinishReason = Literal["stop", "length", "tool_calls", "abort", "error"]


@dataclass(slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(slots=True)
class ImagePart:
    """An image: a ``data:`` URL for inline bytes, or a remote address.

    Dialects decode and validate inline images as they parse (``data`` holds the bytes,
    ``sha256`` their digest, ``width``/``height`` the pixel size); a remote image has only
    its ``url`` until the gateway fetches it (when allowed). ``param`` is the request
    field it came from, so an error found later still names it. ``detail`` is OpenAI's
    resolution hint, kept as sent.
    """

    url: str
    media_type: str | None = None
    type: Literal["image"] = "image"
    data: bytes | None = field(default=None, repr=False)
    sha256: str | None = None
    width: int = 0
    height: int = 0
    detail: str | None = None
    param: str | None = None


ContentPart = TextPart | ImagePart


@dataclass(slots=True)
class ToolCall:
    """A call the model made. ``arguments`` is the JSON text exactly as generated."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Message:
    role: Role
    content: list[ContentPart] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    # For role "tool": the id of the call this message answers.
    tool_call_id: str | None = None
    name: str | None = None
    # Reasoning ("thinking") text the assistant produced before its answer.
    reasoning: str | None = None

    @property
    def text(self) -> str:
        """The concatenated text parts (images skipped)."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@dataclass(slots=True)
class ToolSpec:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


@dataclass(slots=True)
class ToolChoice:
    """``mode`` is auto, none or required; ``name`` forces one tool (mode "required")."""

    mode: Literal["auto", "none", "required"] = "auto"
    name: str | None = None


@dataclass(slots=True)
class ResponseFormat:
    """Structured output: ``json_object`` (any JSON object) or ``json_schema`` (``schema``).

    Served by constrained decoding: the engine samples only tokens the grammar allows.
    ``strict`` is recorded as sent; OpenForge always enforces the schema it is given.
    """

    type: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str | None = None
    strict: bool = False
    param: str | None = None  # the request field it came from, for errors found later


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False  # the client asked for logprobs in its answer (we always record them)
    top_logprobs: int = 0
    # Constrained decoding; None: free text ("text" response format).
    response_format: ResponseFormat | None = None


@dataclass(slots=True)
class Summary:
    """A message standing in a conversation for the turns a compaction replaced."""

    message: int  # its index in ``Conversation.messages``
    source: str  # the response whose answer the summary is (the compaction call's)


@dataclass(slots=True)
class Conversation:
    messages: list[Message]
    # A tuple from the dialects' parsers: the same one for every call that sent the same
    # tools, so what is made of it can be kept by identity (see tools_json).
    tools: Sequence[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    params: SamplingParams = field(default_factory=SamplingParams)
    model: str = ""
    stream: bool = False
    # Reasoning requested by the client (Anthropic ``thinking``, OpenAI ``reasoning``).
    reasoning: bool = False
    # Tool declarations a harness sent that are not functions (web_search, ...): kept, not served.
    ignored_tools: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # Compaction (docs/dialects.md): how the client asked the model to compact this
    # conversation (its last message is then the instruction to summarise it, and the
    # answer's text is the summary), None for any other call; and the summaries of
    # earlier compactions it carries in place of the turns they replaced.
    compact: str | None = None
    summaries: list[Summary] = field(default_factory=list)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class Completion:
    """What the model answered, with the exact tokens behind it."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    prompt_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    # The stop string that ended generation, when one did (Anthropic reports it back).
    stop_sequence: str | None = None

    def message(self) -> Message:
        """The assistant turn this answer becomes in the conversation's history."""
        return assistant_message(self.text, self.tool_calls, self.reasoning)

    @classmethod
    def from_tokens(
        cls,
        text: str,
        reasoning: str | None,
        tool_calls: list[ToolCall],
        finish_reason: FinishReason,
        prompt_ids: list[int],
        output_ids: list[int],
        output_logprobs: list[float],
        model: str = "",
    ) -> Completion:
        """An answer the gateway gives over these ids, counted in them (its usage); a
        finished answer with tool calls ends with "tool_calls"."""
        if tool_calls and finish_reason == "stop":
            finish_reason = "tool_calls"
        usage = Usage(len(prompt_ids), len(output_ids))
        return cls(
            text, reasoning, tool_calls, finish_reason, prompt_ids, output_ids, output_logprobs,
            usage, model,
        )  # fmt: skip


def assistant_message(text: str, tool_calls: list[ToolCall], reasoning: str | None) -> Message:
    """An assistant turn as histories hold it: no empty text part, its own list of calls."""
    return Message(
        role="assistant",
        content=[TextPart(text)] if text else [],
        tool_calls=list(tool_calls),
        reasoning=reasoning,
    )


# Stream events: one internal event model, rendered per dialect at the edge.


@dataclass(slots=True)
class TextDelta:
    text: str
    type: Literal["text"] = "text"


@dataclass(slots=True)
class ReasoningDelta:
    text: str
    type: Literal["reasoning"] = "reasoning"


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str
    type: Literal["tool_call_start"] = "tool_call_start"


@dataclass(slots=True)
class ToolCallArgumentsDelta:
    index: int
    arguments: str
    type: Literal["tool_call_arguments"] = "tool_call_arguments"


CompletionDelta = TextDelta | ReasoningDelta | ToolCallStart | ToolCallArgumentsDelta


_TOOLS_JSON_SIZE = 64
_tools_json: dict[int, tuple[tuple[ToolSpec, ...], bytes]] = {}
_tools_json_lock = threading.Lock()


def tools_json(tools: Sequence[ToolSpec]) -> bytes:
    """``orjson.dumps(tools)``; kept for a tuple, by identity.

    The dialects' parsers hand every call that sent the same tools bytes the same tuple
    (``dialects/prefix.py``, ``KnownMember``), and an agent's tools are 10-60 KB of JSON
    schemas that the renderer (its cache key) and the store (the call's conversation)
    would otherwise serialise again on every call. A list may change after it was seen,
    so it is serialised every time."""
    if type(tools) is not tuple:
        return orjson.dumps(tools)
    kept = _tools_json.get(id(tools))
    if kept is not None and kept[0] is tools:
        return kept[1]
    made = orjson.dumps(tools)
    with _tools_json_lock:
        if len(_tools_json) >= _TOOLS_JSON_SIZE:
            _tools_json.clear()
        _tools_json[id(tools)] = (tools, made)  # the tuple kept alive: its id stays its own
    return made
