"""OpenAI Chat Completions: ``POST /v1/chat/completions``.

Public API: :func:`parse_request`, :func:`render_response`, :class:`ChatStreamEncoder`,
:func:`render_error`.
"""

from openforge.dialects.openai_chat.errors import render_error
from openforge.dialects.openai_chat.parse import parse_request
from openforge.dialects.openai_chat.render import ChatStreamEncoder, render_response

__all__ = ["ChatStreamEncoder", "parse_request", "render_error", "render_response"]
