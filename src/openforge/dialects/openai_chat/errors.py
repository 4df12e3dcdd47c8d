"""OpenAI's error envelope, shared by Chat Completions and Responses.

``{"error": {"message", "type", "param", "code"}}`` — see
https://platform.openai.com/docs/guides/error-codes. ``code`` values are the ones
OpenAI's clients branch on: Codex treats ``context_length_exceeded`` as "compact the
history" and ``server_is_overloaded`` as "back off and retry".
"""

from __future__ import annotations

import orjson

from openforge.dialects.errors import ApiError, ErrorKind
from openforge.dialects.openai_chat.protocol import ErrorBody, ErrorObject

__all__ = ["STATUS", "error_object", "render_error"]

# kind -> (HTTP status, error.type, error.code)
STATUS: dict[ErrorKind, tuple[int, str, str | None]] = {
    "invalid_request": (400, "invalid_request_error", None),
    "authentication": (401, "invalid_request_error", "invalid_api_key"),
    "permission": (403, "permission_error", None),
    "not_found": (404, "invalid_request_error", "not_found"),
    "conflict": (409, "invalid_request_error", "conflict"),
    "context_length": (400, "invalid_request_error", "context_length_exceeded"),
    "request_too_large": (413, "invalid_request_error", "request_too_large"),
    "request_timeout": (408, "invalid_request_error", "request_timeout"),
    "overloaded": (503, "server_error", "server_is_overloaded"),
    "internal": (500, "server_error", "server_error"),
}


def _message(err: ApiError) -> str:
    if err.kind == "context_length" and err.prompt_tokens is not None and err.limit is not None:
        return (
            f"This model's maximum context length is {err.limit} tokens. However, your "
            f"messages resulted in {err.prompt_tokens} tokens. Please reduce the length "
            "of the messages."
        )
    return err.message


def error_object(err: ApiError) -> ErrorObject:
    """The inner ``error`` object for ``err``."""
    _, kind, code = STATUS[err.kind]
    return {"message": _message(err), "type": kind, "param": err.param, "code": code}


def render_error(err: ApiError) -> tuple[int, bytes]:
    """HTTP status and JSON body for ``err`` in OpenAI's envelope."""
    body: ErrorBody = {"error": error_object(err)}
    return STATUS[err.kind][0], orjson.dumps(body)
