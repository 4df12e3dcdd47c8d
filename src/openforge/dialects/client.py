"""The client side of a wire format: what OpenForge sends to, and reads from, another API.

The gateway serves each format (``parse_request`` / ``render_response``); when OpenForge
itself calls an API in that format (a teacher behind a commercial API), the same package
builds the request and reads the answer, so a wire format is one package in both
directions. Each format's ``client`` module holds one small class following
:class:`Client`; the caller owns the transport (URL, HTTP, retries) and maps
:class:`AnswerError` to its own errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from openforge.conversation import Completion, Conversation, SamplingParams

__all__ = ["AnswerError", "Client", "WireRequest", "error_message", "sampling_fields"]


class AnswerError(ValueError):
    """An API's answer is not one this format's client can read."""


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request ready to send: POST ``path`` (under the API's base URL) with ``body``."""

    path: str
    headers: Mapping[str, str]
    body: bytes


class Client(Protocol):
    """A wire format's request builder and answer reader."""

    def request(self, conversation: Conversation, model: str, api_key: str) -> WireRequest:
        """The request asking ``model`` to answer ``conversation``."""
        ...

    def parse(self, data: Mapping[str, Any], model: str) -> Completion:
        """The answer's JSON object as a :class:`Completion` (AnswerError when it has none);
        ``model`` names it when the answer does not."""
        ...


def error_message(data: object) -> str | None:
    """The message of an error answer, in the envelope OpenAI and Anthropic share:
    ``{"error": {"message": ...}}`` (or ``{"error": "..."}``); None when there is none."""
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return str(message) if message else None


def sampling_fields(params: SamplingParams, stop_key: str) -> dict[str, Any]:
    """The sampling settings both formats name alike, sent only when not the default;
    stop strings under ``stop_key`` (``stop``, ``stop_sequences``)."""
    fields: dict[str, Any] = {}
    if params.temperature != 1.0:
        fields["temperature"] = params.temperature
    if params.top_p != 1.0:
        fields["top_p"] = params.top_p
    if params.stop:
        fields[stop_key] = params.stop
    return fields
