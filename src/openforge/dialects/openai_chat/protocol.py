"""OpenAI Chat Completions wire shapes.

Request fields follow https://platform.openai.com/docs/api-reference/chat/create (order
kept; fields we do not use are tolerated and logged by :class:`WireIn`). Response and
chunk shapes follow https://platform.openai.com/docs/api-reference/chat/object and
https://platform.openai.com/docs/api-reference/chat-streaming/streaming.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Discriminator, Field, Tag

from openforge.dialects.wire import WireIn, type_tag

# ---- request ------------------------------------------------------------------------


class TextContent(WireIn):
    type: Literal["text"]
    text: str


class ImageURL(WireIn):
    url: str
    detail: str | None = None


class ImageContent(WireIn):
    type: Literal["image_url"]
    image_url: ImageURL


class RefusalContent(WireIn):
    type: Literal["refusal"]
    refusal: str


UserPart = Annotated[TextContent | ImageContent, Field(discriminator="type")]
AssistantPart = Annotated[TextContent | RefusalContent, Field(discriminator="type")]


class FunctionCallIn(WireIn):
    name: str
    arguments: str


class ToolCallIn(WireIn):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallIn


class InstructionMessage(WireIn):
    """A system or developer message (the same fields; the role tells them apart)."""

    role: Literal["system", "developer"]
    content: str | list[TextContent]
    name: str | None = None


class UserMessage(WireIn):
    role: Literal["user"]
    content: str | list[UserPart]
    name: str | None = None


class AssistantMessage(WireIn):
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    refusal: str | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    # --- OpenForge extension (as vLLM, DeepSeek and SGLang name it) ---
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(WireIn):
    role: Literal["tool"]
    content: str | list[TextContent]
    tool_call_id: str


ChatMessage = Annotated[
    InstructionMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class FunctionDef(WireIn):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(WireIn):
    type: Literal["function"]
    function: FunctionDef


class OtherTool(WireIn):
    """A non-function tool (``custom``, …): accepted, listed in ``ignored_tools``."""

    type: str


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[OtherTool, Tag("other")],
    Discriminator(type_tag(("function",))),
]


class NamedFunction(WireIn):
    name: str


class NamedToolChoice(WireIn):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(WireIn):
    include_usage: bool = False


class TextFormat(WireIn):
    type: Literal["text"]


class JsonObjectFormat(WireIn):
    type: Literal["json_object"]


class JsonSchemaSpec(WireIn):
    name: str
    description: str | None = None
    # "schema" would shadow a BaseModel attribute; the wire name is kept by the alias.
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class JsonSchemaFormat(WireIn):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


# https://platform.openai.com/docs/api-reference/chat/create#chat-create-response_format
ResponseFormatParam = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]


# https://platform.openai.com/docs/api-reference/chat/create#chat-create-reasoning_effort
# (Responses' ``reasoning.effort`` takes the same values).
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ChatCompletionRequest(WireIn):
    messages: list[ChatMessage]
    model: str
    logprobs: bool | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    metadata: dict[str, Any] | None = None
    n: int | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: ReasoningEffort | None = None
    response_format: ResponseFormatParam | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | dict[str, Any] | None = (
        None
    )
    tools: list[Tool] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    top_p: float | None = Field(default=None, ge=0, le=1)
    user: str | None = None
    # --- OpenForge extension (vLLM's name) ---
    top_k: int | None = Field(default=None, ge=-1)


# ---- response -----------------------------------------------------------------------


class TopLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TypedDict):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(TypedDict):
    content: list[TokenLogprob] | None
    refusal: None


class FunctionOut(TypedDict):
    name: str
    arguments: str


class ToolCallOut(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionOut


class MessageOut(TypedDict):
    role: Literal["assistant"]
    content: str | None
    refusal: None
    annotations: list[Any]
    tool_calls: NotRequired[list[ToolCallOut]]
    # --- OpenForge extension ---
    reasoning_content: NotRequired[str]


class Choice(TypedDict):
    index: int
    message: MessageOut
    logprobs: ChoiceLogprobs | None
    finish_reason: str


class UsageOut(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[Choice]
    usage: UsageOut


class FunctionDelta(TypedDict, total=False):
    name: str
    arguments: str


class ToolCallDelta(TypedDict):
    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: FunctionDelta


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    tool_calls: list[ToolCallDelta]
    # --- OpenForge extension ---
    reasoning_content: str


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None
    finish_reason: str | None


class ChatCompletionChunk(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[ChunkChoice]
    usage: NotRequired[UsageOut | None]


class ErrorObject(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: ErrorObject
