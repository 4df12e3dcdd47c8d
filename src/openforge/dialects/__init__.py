"""Wire formats the gateway speaks, one package each, pure (no I/O, no web framework).

- :mod:`openforge.dialects.openai_chat` — ``POST /v1/chat/completions``
- :mod:`openforge.dialects.openai_responses` — ``POST /v1/responses``
- :mod:`openforge.dialects.anthropic` — ``POST /v1/messages`` and ``/v1/messages/count_tokens``

Each declares itself in one :class:`~openforge.dialects.dialect.Dialect` (``DIALECT``): its
route, ``parse_request(body) -> Conversation``, ``render_response(completion, ctx) -> bytes``,
a stream encoder (``start``/``delta``/``finish``/``error`` returning SSE bytes),
``render_error(err) -> (status, body)``, its id prefixes, extra endpoints and the state it
keeps between calls; :data:`openforge.dialects.catalog.DIALECTS` lists them. Errors are
:class:`openforge.dialects.errors.ApiError`; per-call facts are
:class:`openforge.dialects.context.ResponseContext`. A format OpenForge also calls as a
client (a teacher API) has a ``client`` module beside them: request building and answer
parsing (:mod:`openforge.dialects.client`). See ``docs/dialects.md``.
"""
