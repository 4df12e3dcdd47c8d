"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

:data:`DIALECT` declares it to the gateway. Public API: :func:`parse_request`,
:func:`render_response`, :class:`ChatStreamEncoder`, :func:`render_error`.
"""

from openforge.dialects.dialect import Dialect
from openforge.dialects.openai_chat.errors import render_error
from openforge.dialects.openai_chat.parse import parse_request
from openforge.dialects.openai_chat.render import ChatStreamEncoder, render_response

__all__ = ["DIALECT", "ChatStreamEncoder", "parse_request", "render_error", "render_response"]

DIALECT = Dialect(
    name="openai_chat",
    path="/v1/chat/completions",
    parse=parse_request,
    render_response=render_response,
    encoder=ChatStreamEncoder,
    render_error=render_error,
    response_prefix="chatcmpl-",
    tool_prefix="call_",
)
