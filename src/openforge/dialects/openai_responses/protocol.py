"""OpenAI Responses wire shapes.

Request fields follow https://platform.openai.com/docs/api-reference/responses/create
(order kept; ``client_metadata`` is what Codex sends). The response object and
output items follow https://platform.openai.com/docs/api-reference/responses/object;
stream events https://platform.openai.com/docs/api-reference/responses-streaming.
Shapes were checked against what Codex 0.171 reads (``codex-api/src/sse/responses.rs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Discriminator, Field, Tag

from openforge.dialects.openai_chat.protocol import ReasoningEffort
from openforge.dialects.wire import WireIn, type_tag

if TYPE_CHECKING:
    from openforge.conversation import Usage

# ---- request ------------------------------------------------------------------------


class InputText(WireIn):
    type: Literal["input_text"]
    text: str


class OutputText(WireIn):
    type: Literal["output_text"]
    text: str


class InputImage(WireIn):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class Refusal(WireIn):
    type: Literal["refusal"]
    refusal: str


Part = Annotated[InputText | OutputText | InputImage | Refusal, Field(discriminator="type")]


class MessageItem(WireIn):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    id: str | None = None


class FunctionCallItem(WireIn):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    namespace: str | None = None


class FunctionCallOutputItem(WireIn):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[Part]


class SafetyCheck(WireIn):
    id: str
    code: str | None = None
    message: str | None = None


class ComputerCallItem(WireIn):
    """A ``computer_call`` the model made (sent back as history): ``action`` is the
    vendor's action object (``{"type": "click", "button": "left", "x": 1, "y": 2}``) for
    ``computer_use_preview``, ``actions`` a batch of them for the ``computer`` tool."""

    type: Literal["computer_call"]
    call_id: str
    action: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = None
    id: str | None = None
    pending_safety_checks: list[SafetyCheck] = Field(default_factory=list)
    status: str | None = None


class ComputerScreenshot(WireIn):
    # The reference says computer_screenshot; cua-agent sends its screenshots as
    # input_image (the same fields), which OpenAI serves it: both are taken.
    type: Literal["computer_screenshot", "input_image"]
    image_url: str | None = None
    file_id: str | None = None


class ComputerCallOutputItem(WireIn):
    """The screenshot a harness took after running a ``computer_call``."""

    type: Literal["computer_call_output"]
    call_id: str
    output: ComputerScreenshot
    id: str | None = None
    acknowledged_safety_checks: list[SafetyCheck] | None = None
    status: str | None = None


class SummaryText(WireIn):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningText(WireIn):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(WireIn):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None


class CompactionItem(WireIn):
    """The summary of an earlier compaction (``POST /v1/responses/compact``, or a
    ``compaction_trigger``), carried in place of the turns it replaced; its content is
    opaque to the client (``compaction.py`` says what this gateway puts there)."""

    type: Literal["compaction"]
    encrypted_content: str
    id: str | None = None
    created_by: str | None = None


class CompactionTriggerItem(WireIn):
    """Asks for the context to be compacted; must be the final input item."""

    type: Literal["compaction_trigger"]
    id: str | None = None


class OtherItem(WireIn):
    """An item we do not render (web_search_call, local_shell_call, …): refused with its
    name, or, when its type is none of the API's, refused as unknown."""

    type: str


# Every input item type of the API
# (https://platform.openai.com/docs/api-reference/responses/create#responses-create-input):
# one of them this gateway cannot render is refused as unsupported, any other as unknown.
VENDOR_ITEM_TYPES = frozenset(
    {
        "message",
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "web_search_call",
        "function_call",
        "function_call_output",
        "reasoning",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "item_reference",
        "compaction",
        "compaction_trigger",
    }
)


_ITEM_TAGS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "computer_call",
        "computer_call_output",
        "compaction",
        "compaction_trigger",
    }
)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[ComputerCallItem, Tag("computer_call")]
    | Annotated[ComputerCallOutputItem, Tag("computer_call_output")]
    | Annotated[CompactionItem, Tag("compaction")]
    | Annotated[CompactionTriggerItem, Tag("compaction_trigger")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(type_tag(_ITEM_TAGS, missing="message")),
]


class FunctionTool(WireIn):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ComputerUsePreviewTool(WireIn):
    """The ``computer_use_preview`` tool: the model acts on a display of this size with
    ``computer_call`` items; the harness answers each with a screenshot."""

    type: Literal["computer_use_preview"]
    display_width: int = Field(ge=1)
    display_height: int = Field(ge=1)
    environment: Literal["windows", "mac", "linux", "ubuntu", "browser"]


class ComputerTool(WireIn):
    """The ``computer`` tool (no options): the model acts on the screen with batches of
    actions (``computer_call.actions``), each batch answered with one screenshot."""

    type: Literal["computer"]


class OtherTool(WireIn):
    """A hosted or custom tool (web_search, local_shell, custom, …): listed, not served."""

    type: str
    name: str | None = None


InnerTool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")],
    Discriminator(type_tag(("function",))),
]


class NamespaceTool(WireIn):
    """A group of tools under one name: Codex sends each MCP server's tools as one
    (``mcp__<server>``) and its sub-agent tools as ``multi_agent_v1``; a call to one of
    them names it with ``name`` plus ``namespace`` (``codex-rs/protocol/src/tool_name.rs``).
    """

    type: Literal["namespace"]
    name: str = Field(min_length=1)
    description: str = ""
    tools: list[InnerTool]


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[ComputerUsePreviewTool, Tag("computer_use_preview")]
    | Annotated[ComputerTool, Tag("computer")]
    | Annotated[OtherTool, Tag("other")],
    Discriminator(type_tag(("function", "namespace", "computer_use_preview", "computer"))),
]


class NamedToolChoice(WireIn):
    type: Literal["function"]
    name: str


class ReasoningConfig(WireIn):
    effort: ReasoningEffort | None = None
    summary: str | None = None


class TextFormat(WireIn):
    type: Literal["text"]


class JsonObjectFormat(WireIn):
    type: Literal["json_object"]


class JsonSchemaFormat(WireIn):
    type: Literal["json_schema"]
    name: str
    description: str | None = None
    # "schema" would shadow a BaseModel attribute; the wire name is kept by the alias.
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class TextConfig(WireIn):
    """https://platform.openai.com/docs/api-reference/responses/create#responses-create-text
    (``verbosity`` and other fields are kept as extras)."""

    format: (
        Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]
        | None
    ) = None


class ResponsesRequest(WireIn):
    include: list[str] | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    metadata: dict[str, Any] | None = None
    model: str
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    reasoning: ReasoningConfig | None = None
    store: bool | None = None
    stream: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    text: TextConfig | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | dict[str, Any] | None = (
        None
    )
    tools: list[Tool] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    top_p: float | None = Field(default=None, ge=0, le=1)
    user: str | None = None
    # Codex sends per-turn ids here; kept in Conversation.metadata.
    client_metadata: dict[str, Any] | None = None


# ---- response -----------------------------------------------------------------------


class LogprobOut(TypedDict):
    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[Any]


class OutputTextOut(TypedDict):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[LogprobOut]


class ReasoningTextOut(TypedDict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningOut(TypedDict):
    id: str
    type: Literal["reasoning"]
    summary: list[Any]
    content: list[ReasoningTextOut]
    encrypted_content: None
    status: str


class MessageOut(TypedDict):
    id: str
    type: Literal["message"]
    status: str
    role: Literal["assistant"]
    content: list[OutputTextOut]


class FunctionCallOut(TypedDict):
    id: str
    type: Literal["function_call"]
    status: str
    arguments: str
    call_id: str
    name: str
    namespace: NotRequired[str]


class SafetyCheckOut(TypedDict):
    id: str
    code: str
    message: str


class ComputerCallOut(TypedDict):
    id: str
    type: Literal["computer_call"]
    call_id: str
    action: NotRequired[dict[str, Any]]
    actions: NotRequired[list[dict[str, Any]]]
    pending_safety_checks: list[SafetyCheckOut]
    status: str


class CompactionOut(TypedDict):
    id: str
    type: Literal["compaction"]
    encrypted_content: str


class InputMessageOut(TypedDict):
    """A user message the compaction endpoint hands back with the compaction item."""

    id: str
    type: Literal["message"]
    status: str
    role: Literal["user"]
    content: list[dict[str, Any]]


OutputItem = ReasoningOut | MessageOut | FunctionCallOut | ComputerCallOut | CompactionOut


class UsageOut(TypedDict):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


def usage_out(usage: Usage) -> UsageOut:
    """``usage`` as a response's usage object (cached and reasoning tokens not counted apart)."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


class ResponseOut(TypedDict):
    id: str
    object: Literal["response"]
    created_at: int
    status: str
    error: dict[str, Any] | None
    incomplete_details: dict[str, str] | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: dict[str, Any] | None
    store: bool
    temperature: float | None
    text: dict[str, Any]
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_p: float | None
    truncation: str
    usage: UsageOut | None
    user: str | None
    metadata: dict[str, Any]


class CompactedResponseOut(TypedDict):
    """``POST /v1/responses/compact``'s answer (openai-python ``CompactedResponse``)."""

    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[InputMessageOut | CompactionOut]
    usage: UsageOut


class StreamEvent(TypedDict, total=False):
    """Every stream event: ``type`` and ``sequence_number`` plus its own fields.

    One open shape (rather than 16 closed ones) because the encoder stamps
    ``sequence_number`` in one place; the emitters in ``render.py`` fix each event's
    fields, in the docs' order.
    """

    type: str
    sequence_number: int
    response: ResponseOut
    output_index: int
    item: OutputItem
    item_id: str
    content_index: int
    part: OutputTextOut | ReasoningTextOut
    delta: str
    text: str
    arguments: str
    logprobs: list[LogprobOut]
