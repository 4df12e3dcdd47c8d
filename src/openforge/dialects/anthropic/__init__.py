"""Anthropic Messages: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

:data:`DIALECT` declares it to the gateway. Public API: :func:`parse_request`,
:func:`parse_count_tokens_request`, :func:`render_response`, :func:`render_count_tokens`,
:class:`AnthropicStreamEncoder`, :func:`render_error`, :func:`tool_input`.
"""

from openforge.dialects.anthropic.errors import render_error
from openforge.dialects.anthropic.parse import parse_count_tokens_request, parse_request
from openforge.dialects.anthropic.render import (
    AnthropicStreamEncoder,
    render_count_tokens,
    render_response,
    tool_input,
)
from openforge.dialects.dialect import Dialect, TokenCounting

__all__ = [
    "DIALECT",
    "AnthropicStreamEncoder",
    "parse_count_tokens_request",
    "parse_request",
    "render_count_tokens",
    "render_error",
    "render_response",
    "tool_input",
]

DIALECT = Dialect(
    name="anthropic",
    path="/v1/messages",
    parse=parse_request,
    render_response=render_response,
    encoder=AnthropicStreamEncoder,
    render_error=render_error,
    response_prefix="msg_",
    tool_prefix="toolu_",
    token_counting=TokenCounting(
        "/v1/messages/count_tokens", parse_count_tokens_request, render_count_tokens
    ),
)
