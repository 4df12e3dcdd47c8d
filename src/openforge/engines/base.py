"""The engine interface the gateway serves from.

Exceptions::

    EngineError            the engine failed or could not be reached (503 / 529 to harnesses)
    ├── EngineOverloaded   the engine is up but refuses work now (retryable)
    └── EngineRequestError the request cannot be served as asked (a response format whose
        │                  schema does not compile): the client's error (400)
        └── ContextOverflow the prompt does not fit the engine's context: each dialect's
                           context-length error (400)

An engine knows nothing of dialects or conversations: it takes prompt token ids and
sampling parameters and yields the ids it sampled with the logprob of each, as it
samples them. Cancelling the consuming task cancels the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import orjson

from openforge.conversation import Completion, Conversation, SamplingParams

__all__ = [
    "AdapterEngine",
    "ContextOverflow",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineOverloaded",
    "EngineRequest",
    "EngineRequestError",
    "PromptImage",
    "TextEngine",
    "TokenChunk",
    "UpdatableEngine",
]

EngineFinish = Literal["stop", "length", "abort"]


class EngineError(Exception):
    """The engine failed or is unreachable."""


class EngineOverloaded(EngineError):
    """The engine refuses work for now; the client should retry."""


class EngineRequestError(EngineError):
    """The request itself cannot be served (retrying it will not help)."""


class ContextOverflow(EngineRequestError):
    """The prompt's ``prompt_tokens`` leave no room for output in the engine's context of
    ``limit`` tokens (a server may serve less than the model's configured context)."""

    def __init__(self, prompt_tokens: int, limit: int, detail: str = "") -> None:
        message = f"the prompt has {prompt_tokens} tokens; the context holds {limit}"
        super().__init__(f"{message} ({detail})" if detail else message)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


@dataclass(frozen=True, slots=True)
class PromptImage:
    """An image the prompt shows a VLM, in prompt order. Its placeholder ids are already
    expanded in ``prompt_ids`` (to the grid the model's own image processor gives it)."""

    data: bytes = field(repr=False)
    media_type: str
    sha256: str


@dataclass(slots=True)
class EngineRequest:
    prompt_ids: list[int]
    params: SamplingParams
    # Lets multi-replica engines keep a rollout on one replica (prefix-cache reuse).
    rollout_id: str | None = None
    request_id: str = ""
    # Absolute limit on prompt + output tokens; engines cap max_tokens to fit.
    context_length: int | None = None
    images: list[PromptImage] = field(default_factory=list)
    # ``prompt_ids`` as a JSON array, when the renderer made it from cached pieces
    # (``RenderedPrompt.ids_json``): an HTTP engine sends it as is instead of serialising
    # a rollout's whole prompt again on every call. It must encode exactly ``prompt_ids``.
    prompt_json: bytes | None = None
    # Whether the caller uses tokens as they come (a streamed answer). When it does not,
    # an HTTP engine may ask its server for the whole answer at once: one chunk, with the
    # finish reason (the server then serializes and sends one answer, not one event per
    # token, and nothing reached a client before an error, so any error may be retried).
    stream: bool = True

    def prompt(self) -> list[int] | orjson.Fragment:
        """The prompt ids for a JSON body: the ready JSON when there is one."""
        if self.prompt_json is not None:
            return orjson.Fragment(self.prompt_json)
        return self.prompt_ids


@dataclass(slots=True)
class TokenChunk:
    """Newly sampled ids with their logprobs; the last chunk carries ``finish_reason``.

    ``finish_reason`` is "stop" for EOS, a stop token or a stop string (the matched
    stop string's tokens are included in ``ids``; ``stop_text`` names it), "length" for
    max tokens, "abort" when cancelled.
    """

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: EngineFinish | None = None
    stop_text: str | None = None


@dataclass(slots=True)
class EngineInfo:
    kind: str  # "scripted", "local", "vllm", "sglang", "upstream"
    model: str  # what the engine serves (a name or path)
    context_length: int
    weight_version: str = "0"


@runtime_checkable
class Engine(Protocol):
    """A token-in/token-out engine."""

    def info(self) -> EngineInfo: ...

    def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Stream the sampled ids; the final chunk has ``finish_reason`` set."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class TextEngine(Protocol):
    """A text-level engine (a teacher API): its calls are recorded for SFT, never RL."""

    def info(self) -> EngineInfo: ...

    def complete(self, conversation: Conversation) -> AsyncIterator[Completion]:
        """Yield one finished :class:`Completion` (text-level: no ids or logprobs)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class UpdatableEngine(Protocol):
    """An engine whose weights can be replaced without restarting the gateway."""

    async def update_weights(self, path: str, version: str) -> None:
        """Load the checkpoint at ``path`` (a safetensors directory) as ``version``."""
        ...


@runtime_checkable
class AdapterEngine(Protocol):
    """An engine that serves a LoRA adapter loaded at run time for the policy's calls."""

    async def load_adapter(self, name: str, path: str, version: str) -> None:
        """Serve the adapter directory at ``path`` as ``name`` for later requests, stamped
        ``version`` (replacing an adapter loaded under that name before)."""
        ...

    def route_adapter(self, name: str | None, version: str) -> None:
        """Name the adapter ``name``, already loaded on the engine's server (through
        another gateway), as later requests' model, stamped ``version``; None: the base."""
        ...
