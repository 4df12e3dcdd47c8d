"""OpenAI Responses: ``POST /v1/responses`` (what Codex speaks).

Public API: :func:`parse_request`, :func:`render_response`,
:class:`ResponsesStreamEncoder`, :func:`render_error` (OpenAI's envelope).
"""

from openforge.dialects.openai_chat.errors import render_error
from openforge.dialects.openai_responses.parse import parse_request
from openforge.dialects.openai_responses.render import ResponsesStreamEncoder, render_response

__all__ = ["ResponsesStreamEncoder", "parse_request", "render_error", "render_response"]
