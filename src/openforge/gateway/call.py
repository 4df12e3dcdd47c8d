"""One model call in flight (:class:`Call`: its inputs and what it produced so far), the
wire format it is served in, and how its failures read to the client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope

from openforge.conversation import Completion, Conversation, ImagePart
from openforge.dialects.context import ResponseContext
from openforge.dialects.dialect import ConversationState, Dialect
from openforge.dialects.errors import ApiError
from openforge.dialects.ids import new_id
from openforge.engines.base import (
    ContextOverflow,
    EngineError,
    EngineOverloaded,
    EngineRequestError,
)
from openforge.gateway.control import RolloutState
from openforge.gateway.prompting import Rendered
from openforge.gateway.stops import StopGuard
from openforge.store.base import RolloutConflict, StoreError
from openforge.store.rows import RequestColumns
from openforge.store.schemas import CallStatus, Rollout

__all__ = [
    "UNRECORDED",
    "Call",
    "Commit",
    "ContextOf",
    "ServedDialect",
    "engine_error",
    "refused",
]

# What a client is told when its answer could not be recorded (it may retry).
UNRECORDED = ApiError(
    "internal", "The gateway could not record this call (its store failed); please retry."
)


@dataclass(frozen=True, slots=True)
class ServedDialect:
    """A wire format as this gateway serves it: its declaration and its state."""

    dialect: Dialect
    memory: ConversationState


@dataclass(slots=True)
class Call:
    """One call in flight: its inputs and what it produced so far (read by the recorder)."""

    served: ServedDialect
    body: bytes
    scope: Scope
    state: RolloutState
    seq: int
    t0: float
    created: float
    conversation: Conversation | None = None
    status: CallStatus = CallStatus.OK
    prompt_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop_text: str | None = None
    fork: bool = False
    render_info: dict[str, Any] = field(default_factory=dict)
    completion: Completion | None = None
    error: str | None = None
    queued_s: float = 0.0
    first_token_s: float | None = None
    recorded: bool = False
    rendered: Rendered | None = None
    images: list[ImagePart] = field(default_factory=list)
    response_id: str | None = None
    stop_guard: StopGuard | None = None  # streaming with stop strings
    id: str = field(default_factory=lambda: new_id("call-"))
    # Its request columns, computed while the engine generated (the store's prepare_call).
    request: RequestColumns | None = None
    # The record's request-side fields, made once (the body with images is re-serialised).
    request_fields: dict[str, Any] | None = None
    # The weight version when the call was admitted, and the control's count of version
    # changes then (a call that ran across a change is marked on its record).
    weight_version: str | None = None
    version_changes: int = 0


# The service's stages that answering from an engine needs: the answer's response
# context (its id minted in the dialect's style), and its commit to the rollout's
# history and the dialect's memory once recorded.
ContextOf = Callable[[Call, Conversation], ResponseContext]
Commit = Callable[[Call, Conversation, Completion, ResponseContext], Awaitable[None]]


def refused(rollout: Rollout, exc: StoreError) -> ApiError:
    """Why a call of ``rollout`` is refused when the store gives it no ``seq``."""
    if isinstance(exc, RolloutConflict):
        return ApiError("permission", f"Rollout {rollout.id} is finished; no more calls.")
    return ApiError("overloaded", f"The store is unavailable: {exc}")


def engine_error(exc: EngineError, conversation: Conversation | None = None) -> ApiError:
    """The client's error for an engine's failure (``conversation``: the request, whose
    field an engine refusing the request's own content names)."""
    if isinstance(exc, ContextOverflow):  # the engine serves less context than configured
        return ApiError.context_length(exc.prompt_tokens, exc.limit)
    if isinstance(exc, EngineRequestError):  # the request's own fault: retrying won't help
        fmt = conversation.params.response_format if conversation is not None else None
        param = fmt.param if fmt is not None else None
        return ApiError("invalid_request", f"Cannot serve this request: {exc}", param)
    # Both map to 503 / 529 so harnesses retry.
    what = "overloaded" if isinstance(exc, EngineOverloaded) else "unavailable"
    return ApiError("overloaded", f"The engine is {what}: {exc}")
