"""What a wire format declares about itself, in one typed object per dialect package.

The gateway serves every :class:`Dialect` in :data:`openforge.dialects.catalog.DIALECTS`
the same way and names none of them: the route path, request parser, response renderer,
stream encoder, error envelope, id prefixes, extra endpoints (token counting) and any state
the API keeps between calls (Responses' stored responses) and further routes of the same
format (Responses' compaction endpoint) all come from here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from openforge.conversation import Completion, CompletionDelta, Conversation
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.prefix import BodyMemo

__all__ = [
    "ConversationState",
    "Dialect",
    "RequestParser",
    "Stateless",
    "StoredAnswer",
    "StreamEncoder",
    "TokenCounting",
]


class StreamEncoder(Protocol):
    """One streamed answer's SSE bytes, event by event (state lives in the encoder)."""

    def start(self) -> bytes: ...

    def delta(self, d: CompletionDelta) -> bytes: ...

    def finish(self, completion: Completion) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


class RequestParser(Protocol):
    """A model call's body -> the canonical conversation (ApiError, naming the field, when
    it is not one). ``memo`` is the rollout's in this dialect: a parser that recognises
    a resent body (:mod:`openforge.dialects.prefix`) parses only what is new and updates
    it; one that does not leaves it alone."""

    def __call__(self, body: bytes, memo: BodyMemo | None = None) -> Conversation: ...


# (rollout id, response id) -> that rollout's answered conversation, answer included (last,
# with the request's ``compact`` and ``summaries``), from durable storage; None when the
# rollout has no such answer. Provided by the gateway.
StoredAnswer = Callable[[str, str], Awaitable[Conversation | None]]


class ConversationState(Protocol):
    """What an API remembers between calls, per gateway, scoped to each rollout."""

    async def resolve(self, conversation: Conversation, rollout_id: str) -> Conversation:
        """The full conversation a request stands for (raises ApiError when it cannot)."""
        ...

    def remember(
        self, rollout_id: str, response_id: str, conversation: Conversation, completion: Completion
    ) -> None:
        """Note an answered call (called once it is recorded)."""
        ...


class Stateless:
    """The state of an API that keeps none: each request carries its whole conversation."""

    def __init__(self, stored: StoredAnswer) -> None:
        del stored  # nothing to look up

    async def resolve(self, conversation: Conversation, rollout_id: str) -> Conversation:
        """``conversation`` itself."""
        return conversation

    def remember(
        self, rollout_id: str, response_id: str, conversation: Conversation, completion: Completion
    ) -> None:
        """Nothing to remember."""


@dataclass(frozen=True, slots=True)
class TokenCounting:
    """An endpoint that counts a request's prompt tokens without generating."""

    path: str
    parse: Callable[[bytes], Conversation]
    render: Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class Dialect:
    """Everything about one wire format that the gateway needs to serve it."""

    name: str  # as recorded on calls: "openai_chat", "openai_responses", "anthropic"
    path: str  # the model route, e.g. "/v1/chat/completions"
    parse: RequestParser
    render_response: Callable[[Completion, ResponseContext], bytes]
    encoder: Callable[[ResponseContext], StreamEncoder]
    render_error: Callable[[ApiError], tuple[int, bytes]]
    response_prefix: str  # "chatcmpl-", "resp_", "msg_"
    tool_prefix: str  # "call_" (OpenAI), "toolu_" (Anthropic)
    new_state: Callable[[StoredAnswer], ConversationState] = Stateless
    token_counting: TokenCounting | None = None
    # More model routes of the same wire format, each parsed and answered in its own
    # shape but served like the main route and sharing its state (Responses'
    # ``POST /v1/responses/compact``); their own ``new_state`` and ``variants`` are unused.
    variants: tuple[Dialect, ...] = ()
