"""OpenAI Responses: ``POST /v1/responses`` (what Codex speaks) and its compaction
endpoint ``POST /v1/responses/compact``.

:data:`DIALECT` declares it to the gateway, with :class:`StoredResponses` as its state
(``previous_response_id``) and :data:`COMPACT` as a further route (``compaction.py``).
Public API: :func:`parse_request`, :func:`render_response`, :class:`ResponsesStreamEncoder`,
:func:`render_error` (OpenAI's envelope).
"""

from openforge.dialects.dialect import Dialect
from openforge.dialects.openai_chat.errors import render_error
from openforge.dialects.openai_responses.compaction import render_compacted
from openforge.dialects.openai_responses.memory import StoredResponses
from openforge.dialects.openai_responses.parse import parse_compact_request, parse_request
from openforge.dialects.openai_responses.render import ResponsesStreamEncoder, render_response

__all__ = [
    "COMPACT",
    "DIALECT",
    "ResponsesStreamEncoder",
    "StoredResponses",
    "parse_request",
    "render_error",
    "render_response",
]

COMPACT = Dialect(
    name="openai_responses",
    path="/v1/responses/compact",
    parse=parse_compact_request,
    render_response=render_compacted,
    encoder=ResponsesStreamEncoder,  # never used: a compaction is answered whole
    render_error=render_error,
    response_prefix="resp_",
    tool_prefix="call_",
)

DIALECT = Dialect(
    name="openai_responses",
    path="/v1/responses",
    parse=parse_request,
    render_response=render_response,
    encoder=ResponsesStreamEncoder,
    render_error=render_error,
    response_prefix="resp_",
    tool_prefix="call_",
    new_state=StoredResponses,
    variants=(COMPACT,),
)
