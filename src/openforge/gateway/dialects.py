"""The three wire formats as the gateway uses them: one :class:`DialectSpec` each.

A spec bundles the dialect's parse, render, stream encoder and error renderer with the
id styles the gateway mints for it: response ids (``chatcmpl-…``, ``resp_…``,
``msg_…``) and tool-call ids (``call_…`` for OpenAI, ``toolu_…`` for Anthropic).
"""

from __future__ import annotations

import importlib
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from openforge.conversation import Completion, CompletionDelta, Conversation
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError

__all__ = ["DialectSpec", "StreamEncoder", "load_dialects", "new_id"]


class StreamEncoder(Protocol):
    def start(self) -> bytes: ...

    def delta(self, d: CompletionDelta) -> bytes: ...

    def finish(self, completion: Completion) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


_PROCESS_TAG = secrets.token_hex(6)
_COUNTER = itertools.count()


def new_id(prefix: str) -> str:
    """A fresh id in a provider's style: ``prefix`` and 24 hex characters.

    Unique, not secret (response and tool-call ids are not credentials): a random
    per-process tag plus a counter, because a urandom call per id is measurable here.
    """
    return f"{prefix}{_PROCESS_TAG}{next(_COUNTER):012x}"


@dataclass(frozen=True, slots=True)
class DialectSpec:
    name: str  # as recorded on calls: "openai_chat", "openai_responses", "anthropic"
    parse: Callable[[bytes], Conversation]
    render_response: Callable[[Completion, ResponseContext], bytes]
    encoder: Callable[[ResponseContext], StreamEncoder]
    render_error: Callable[[ApiError], tuple[int, bytes]]
    response_prefix: str
    tool_prefix: str
    stream_headers: tuple[tuple[bytes, bytes], ...] = ()


# (dialect name, module, response-id prefix, tool-call-id prefix)
_TABLE = (
    ("openai_chat", "openforge.dialects.openai_chat", "chatcmpl-", "call_"),
    ("openai_responses", "openforge.dialects.openai_responses", "resp_", "call_"),
    ("anthropic", "openforge.dialects.anthropic", "msg_", "toolu_"),
)


def _encoder(module: Any) -> Any:
    names = [n for n in getattr(module, "__all__", ()) if n.endswith("StreamEncoder")]
    return getattr(module, names[0]) if names else None


def load_dialects() -> dict[str, DialectSpec]:
    """The dialects whose modules are importable, by name."""
    out: dict[str, DialectSpec] = {}
    for name, module_name, rprefix, tprefix in _TABLE:
        try:
            module: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        enc = _encoder(module)
        if enc is None:
            continue
        out[name] = DialectSpec(
            name=name,
            parse=module.parse_request,
            render_response=module.render_response,
            encoder=enc,
            render_error=module.render_error,
            response_prefix=rprefix,
            tool_prefix=tprefix,
        )
    return out
