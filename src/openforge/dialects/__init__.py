"""Wire formats the gateway speaks, one package each, pure (no I/O, no web framework).

- :mod:`openforge.dialects.openai_chat` — ``POST /v1/chat/completions``
- :mod:`openforge.dialects.openai_responses` — ``POST /v1/responses``
- :mod:`openforge.dialects.anthropic` — ``POST /v1/messages`` and ``/v1/messages/count_tokens``

Each exposes ``parse_request(body) -> Conversation``, ``render_response(completion, ctx)
-> bytes``, a stream encoder (``start``/``delta``/``finish``/``error`` returning SSE
bytes) and ``render_error(err) -> (status, body)``. Errors are
:class:`openforge.dialects.errors.ApiError`; per-call facts are
:class:`openforge.dialects.context.ResponseContext`. See ``docs/dialects.md``.
"""
