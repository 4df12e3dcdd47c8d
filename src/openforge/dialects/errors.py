"""The one error type every dialect renders, and the request-body decoding that raises it.

Exceptions::

    ApiError(kind, message, param=None)     an error a harness should see in its own dialect
      kind  invalid_request   bad JSON, a missing or ill-typed field, an unsupported value (400)
            authentication    no or wrong key / rollout key (401)
            permission        the key may not do this (403)
            not_found         unknown model, response id or route (404)
            conflict          a repeat that contradicts an earlier request (409)
            context_length    prompt (+ max tokens) exceeds the model's context (400)
            request_too_large the body is over the gateway's limit (413)
            request_timeout   the body did not arrive in time (408)
            overloaded        engine unavailable or draining; the client should retry (503 / 529)
            internal          anything else: a bug or an engine failure (500)

Each dialect maps a kind to its own HTTP status and JSON envelope with its
``render_error(err)`` and to its in-band stream error event with its stream encoder's
``error(err)``. Raise :class:`ApiError` anywhere below a route; the route renders it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from openforge.dialects.wire import log_ignored

__all__ = ["MAX_DEPTH", "ApiError", "ErrorKind", "decode_body", "load_body", "validate_body"]

ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "permission",
    "not_found",
    "conflict",
    "context_length",
    "request_too_large",
    "request_timeout",
    "overloaded",
    "internal",
]

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

# Requests nest JSON at most this deep. Real bodies stay far below (Claude Code's tool schemas
# reach ~12); the bound keeps every accepted request storable: orjson parses 1,024 levels
# but serialises only 254, and the store serialises the canonical conversation.
MAX_DEPTH = 128
_SERIALISER_DEPTH = 254


class _Wrapper(threading.local):
    """Lists nested ``_SERIALISER_DEPTH - MAX_DEPTH`` deep, built once per thread (building
    them per call cost more than the serialisation they wrap)."""

    def __init__(self) -> None:
        self.inner: list[object] = [None]
        outer = self.inner
        for _ in range(_SERIALISER_DEPTH - MAX_DEPTH - 1):
            outer = [outer]
        self.outer = outer


_wrapper = _Wrapper()


def _too_deep(value: object) -> bool:
    """Whether ``value`` (a parsed body) nests deeper than :data:`MAX_DEPTH`."""
    # orjson's serialiser, in C, refuses past its own depth: wrapped in the difference, the
    # value serialises exactly when it nests at most MAX_DEPTH deep. (Serialising an agent's
    # 21 KB body takes ~5 µs; counting its brackets to skip that took ~20.)
    wrap = _wrapper
    wrap.inner[0] = value
    try:
        orjson.dumps(wrap.outer)
    except orjson.JSONEncodeError:
        return True
    finally:
        wrap.inner[0] = None
    return False


class ApiError(Exception):
    """An error rendered to the client in its dialect.

    ``param`` names the offending request field as a path (``messages[2].content``).
    For ``context_length`` errors, ``prompt_tokens`` and ``limit`` let each dialect word
    the message the way its clients parse it (Claude Code reads Anthropic's
    ``prompt is too long: N tokens > M maximum``); :meth:`context_length` builds one.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        param: str | None = None,
        *,
        prompt_tokens: int | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.param = param
        self.prompt_tokens = prompt_tokens
        self.limit = limit

    @classmethod
    def context_length(cls, prompt_tokens: int, limit: int) -> ApiError:
        """The prompt does not fit: ``prompt_tokens`` > ``limit`` (the context size)."""
        return cls(
            "context_length",
            f"prompt is too long: {prompt_tokens} tokens > {limit} maximum",
            "messages",
            prompt_tokens=prompt_tokens,
            limit=limit,
        )

    def __repr__(self) -> str:
        return f"ApiError({self.kind!r}, {self.message!r}, param={self.param!r})"


def _loc_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif path:
            path += f".{part}"
        else:
            path = part
    return path


def _clean_loc(loc: tuple[int | str, ...], tags: frozenset[str]) -> tuple[int | str, ...]:
    # Discriminated unions add the tag ("function", "text", ...) and pydantic adds
    # type names ("str", "list[...]") to locations; a client wants the JSON path only. A tag
    # is one element: the one after it is a field even when it has the tag's name
    # (``response_format`` tag "json_schema", then its field ``json_schema``).
    # A top-level member is never a tag (Anthropic's ``thinking`` config shares its name
    # with the thinking block's tag).
    out: list[int | str] = list(loc[:1])
    after_tag = False
    for p in loc[1:]:
        if isinstance(p, int) or after_tag:
            out.append(p)
            after_tag = False
        elif p in tags:
            after_tag = True
        elif "[" not in p and p != "str":
            out.append(p)
    return tuple(out)


def decode_body(body: bytes, model: type[M], *, union_tags: frozenset[str] = frozenset()) -> M:
    """Parse ``body`` as JSON and validate it as ``model``.

    Any failure raises ``ApiError("invalid_request")`` whose message names the first
    bad field and whose ``param`` is its path; ``union_tags`` lists discriminator tags
    to drop from reported paths.
    """
    return validate_body(load_body(body), model, union_tags=union_tags)


def load_body(body: bytes) -> dict[str, Any]:
    """``body`` as a JSON object; ``ApiError("invalid_request")`` when it is not one."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(
            "invalid_request", f"The request body is not valid JSON: {exc}", None
        ) from None
    if not isinstance(raw, dict):
        raise ApiError("invalid_request", "The request body must be a JSON object.", None)
    return raw


def validate_body(
    raw: dict[str, Any],
    model: type[M],
    *,
    union_tags: frozenset[str] = frozenset(),
    members: Mapping[str, object] | None = None,
) -> M:
    """A parsed body validated as ``model``; ``ApiError`` as :func:`decode_body` words it.

    ``members``: top-level members already validated (as ``model`` holds them), put into
    ``raw`` after its depth check; a model instance in them is taken as it is."""
    if _too_deep(raw):
        raise ApiError(
            "invalid_request", f"The request body nests JSON deeper than {MAX_DEPTH} levels."
        )
    if members:
        raw.update(members)
    try:
        request = model.model_validate(raw)
    except ValidationError as exc:
        # In a union (``str | list[...]``) the deepest failure is the one that explains.
        first = max(exc.errors(include_url=False), key=lambda e: len(e["loc"]))
        path = _loc_path(_clean_loc(tuple(first["loc"]), union_tags))
        where = path or "body"
        if first["type"] == "missing":
            message = f"Missing required parameter: '{where}'."
        else:
            message = f"Invalid value for '{where}': {first['msg']}."
        log.debug("rejected request: %s (%d validation errors)", message, exc.error_count())
        raise ApiError("invalid_request", message, path or None) from None
    log_ignored(request)
    return request
