"""Anthropic Messages wire shapes.

Request fields follow https://docs.anthropic.com/en/api/messages (order kept); beta
and future fields (``context_management``, ``output_config``, …) are tolerated and
logged by :class:`WireIn`. Stream events follow
https://docs.anthropic.com/en/api/messages-streaming; errors follow
https://docs.anthropic.com/en/api/errors; token counting
https://docs.anthropic.com/en/api/messages-count-tokens.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Discriminator, Field, Tag

from openforge.dialects.wire import WireIn, type_tag, wire_type

# ---- request ------------------------------------------------------------------------


class TextBlock(WireIn):
    type: Literal["text"]
    text: str


class Base64Source(WireIn):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(WireIn):
    type: Literal["url"]
    url: str


class ImageBlock(WireIn):
    type: Literal["image"]
    source: Annotated[Base64Source | URLSource, Field(discriminator="type")]


class ToolUseBlock(WireIn):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


ToolResultPart = Annotated[TextBlock | ImageBlock, Field(discriminator="type")]


class ToolResultBlock(WireIn):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultPart] = ""
    is_error: bool = False


class ThinkingBlock(WireIn):
    type: Literal["thinking"]
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(WireIn):
    type: Literal["redacted_thinking"]
    data: str


class OtherBlock(WireIn):
    """A block we cannot render (document, server tool results, …): refused with its
    name, or, when its type is none of the API's, refused as unknown."""

    type: str


# Every block type the Messages API takes in a request
# (https://docs.anthropic.com/en/api/messages, ``messages.content``): one of them that
# this gateway cannot render is refused as unsupported, any other type as unknown.
VENDOR_BLOCK_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "tool_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)


_BLOCK_TAGS = frozenset(
    {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(type_tag(_BLOCK_TAGS)),
]


class MessageParam(WireIn):
    # "system" is not in the public docs, but Claude Code sends such turns mid-history.
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class CustomTool(WireIn):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ServerTool(WireIn):
    """A server tool (``web_search_20250305``, ``code_execution_…``, …): listed, not
    served (Anthropic runs them; nothing here could)."""

    type: str
    name: str | None = None


class DefinedTool(WireIn):
    """An Anthropic-defined client tool (``computer_20250124``, ``bash_20250124``,
    ``text_editor_20250728``, …): the model knows its schema, the client runs it. Served
    (see :mod:`openforge.dialects.anthropic.defined`); the options of every version are
    here, and ``defined`` refuses one its version does not have."""

    type: str
    name: str
    display_width_px: int | None = Field(default=None, ge=1)
    display_height_px: int | None = Field(default=None, ge=1)
    display_number: int | None = None
    enable_zoom: bool | None = None
    max_characters: int | None = Field(default=None, ge=1)


class MemberConfig(WireIn):
    enabled: bool | None = None
    defer_loading: bool | None = None


class ToolsetTool(WireIn):
    """An Anthropic-defined toolset (``computer_toolset_20260801``): one entry, no name,
    that offers a family of member tools (``left_click``, ``scroll``, …), each enabled
    unless ``configs`` turns it off."""

    type: str
    configs: dict[str, MemberConfig | None] | None = None


# The type of a defined tool or toolset: family and version date. A date this gateway
# does not know is refused by name, never served as an empty tool or dropped.
DEFINED_TYPE = re.compile(r"(computer|bash|text_editor)_[0-9]{8}")
TOOLSET_TYPE = re.compile(r"computer_toolset_[0-9]{8}")


def _tool_tag(value: Any) -> str:
    kind = wire_type(value)
    if kind in (None, "custom"):
        return "custom"
    if not isinstance(kind, str):
        return "server"
    if DEFINED_TYPE.fullmatch(kind):
        return "defined"
    return "toolset" if TOOLSET_TYPE.fullmatch(kind) else "server"


Tool = Annotated[
    Annotated[CustomTool, Tag("custom")]
    | Annotated[DefinedTool, Tag("defined")]
    | Annotated[ToolsetTool, Tag("toolset")]
    | Annotated[ServerTool, Tag("server")],
    Discriminator(_tool_tag),
]


class ToolChoice(WireIn):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingConfig(WireIn):
    type: Literal["enabled", "disabled", "adaptive"]
    # The docs: "Must be ≥1024 and less than max_tokens", required when enabled (the
    # parser checks that). The bound by max_tokens is not checked: interleaved thinking,
    # a beta header Claude Code sends, lifts it, and the parser sees bodies only.
    budget_tokens: int | None = Field(default=None, ge=1024)


class CountTokensRequest(WireIn):
    """The ``/v1/messages/count_tokens`` body: a Messages body without ``max_tokens``."""

    model: str
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    thinking: ThinkingConfig | None = None
    tool_choice: ToolChoice | None = None
    tools: list[Tool] | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    metadata: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)


# ---- response -----------------------------------------------------------------------


class TextOut(TypedDict):
    type: Literal["text"]
    text: str


class ThinkingOut(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseOut(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    # The toolset a member tool belongs to (``computer`` for ``left_click``, …).
    toolset_name: NotRequired[str]


BlockOut = TextOut | ThinkingOut | ToolUseOut


class UsageOut(TypedDict):
    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    output_tokens: int


class MessageOut(TypedDict):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    content: list[BlockOut]
    model: str
    stop_reason: str | None
    stop_sequence: str | None
    usage: UsageOut


class MessageStart(TypedDict):
    type: Literal["message_start"]
    message: MessageOut


class Ping(TypedDict):
    type: Literal["ping"]


class ContentBlockStart(TypedDict):
    type: Literal["content_block_start"]
    index: int
    content_block: BlockOut


class TextDeltaOut(TypedDict):
    type: Literal["text_delta"]
    text: str


class ThinkingDeltaOut(TypedDict):
    type: Literal["thinking_delta"]
    thinking: str


class SignatureDeltaOut(TypedDict):
    type: Literal["signature_delta"]
    signature: str


class InputJsonDeltaOut(TypedDict):
    type: Literal["input_json_delta"]
    partial_json: str


class ContentBlockDelta(TypedDict):
    type: Literal["content_block_delta"]
    index: int
    delta: TextDeltaOut | ThinkingDeltaOut | SignatureDeltaOut | InputJsonDeltaOut


class ContentBlockStop(TypedDict):
    type: Literal["content_block_stop"]
    index: int


class StopDelta(TypedDict):
    stop_reason: str
    stop_sequence: str | None


class DeltaUsage(TypedDict):
    output_tokens: int
    input_tokens: NotRequired[int]


class MessageDelta(TypedDict):
    type: Literal["message_delta"]
    delta: StopDelta
    usage: DeltaUsage


class MessageStop(TypedDict):
    type: Literal["message_stop"]


class ErrorObject(TypedDict):
    type: str
    message: str


class ErrorEvent(TypedDict):
    type: Literal["error"]
    error: ErrorObject


StreamEvent = (
    MessageStart
    | Ping
    | ContentBlockStart
    | ContentBlockDelta
    | ContentBlockStop
    | MessageDelta
    | MessageStop
    | ErrorEvent
)


class TokenCount(TypedDict):
    input_tokens: int
