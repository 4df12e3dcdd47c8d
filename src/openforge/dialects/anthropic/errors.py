"""Anthropic's error envelope: ``{"type": "error", "error": {"type", "message"}}``.

Statuses and types per https://docs.anthropic.com/en/api/errors; 529
``overloaded_error`` is what Claude Code and the SDKs retry with backoff.
"""

from __future__ import annotations

import orjson

from openforge.dialects.anthropic.protocol import ErrorEvent
from openforge.dialects.errors import ApiError, ErrorKind

__all__ = ["STATUS", "error_event", "render_error"]

STATUS: dict[ErrorKind, tuple[int, str]] = {
    "invalid_request": (400, "invalid_request_error"),
    "authentication": (401, "authentication_error"),
    "permission": (403, "permission_error"),
    "not_found": (404, "not_found_error"),
    # Anthropic documents no 409 type; the SDKs key ConflictError on the status.
    "conflict": (409, "invalid_request_error"),
    "context_length": (400, "invalid_request_error"),
    "request_too_large": (413, "request_too_large"),
    "request_timeout": (408, "invalid_request_error"),
    "overloaded": (529, "overloaded_error"),
    "internal": (500, "api_error"),
}


def error_event(err: ApiError) -> ErrorEvent:
    """The error body, also the data of an in-band ``event: error``."""
    message = err.message
    if err.kind == "context_length" and err.prompt_tokens is not None and err.limit is not None:
        # Claude Code parses exactly this sentence to decide to compact.
        message = f"prompt is too long: {err.prompt_tokens} tokens > {err.limit} maximum"
    return {"type": "error", "error": {"type": STATUS[err.kind][1], "message": message}}


def render_error(err: ApiError) -> tuple[int, bytes]:
    """HTTP status and JSON body for ``err`` in Anthropic's envelope."""
    return STATUS[err.kind][0], orjson.dumps(error_event(err))
