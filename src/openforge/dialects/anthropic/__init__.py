"""Anthropic Messages: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Public API: :func:`parse_request`, :func:`parse_count_tokens_request`,
:func:`render_response`, :func:`render_count_tokens`, :class:`AnthropicStreamEncoder`,
:func:`render_error`, :func:`tool_input`.
"""

from openforge.dialects.anthropic.errors import render_error
from openforge.dialects.anthropic.parse import parse_count_tokens_request, parse_request
from openforge.dialects.anthropic.render import (
    AnthropicStreamEncoder,
    render_count_tokens,
    render_response,
    tool_input,
)

__all__ = [
    "AnthropicStreamEncoder",
    "parse_count_tokens_request",
    "parse_request",
    "render_count_tokens",
    "render_error",
    "render_response",
    "tool_input",
]
