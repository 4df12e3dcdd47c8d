"""The part of a request body its rollout already sent, recognised from the bytes.

An agent resends its whole conversation on every call: by turn 48 of the gateway bench a
body is ~180 KB, of which 3 KB are new, and parsing, depth-checking and validating all of
it cost each call time in proportion to the history. A harness serialises a conversation
the same way every time, so a new body starts with the bytes of the previous one up to
the end of some message, and those messages are the ones already parsed. Only the rest is
parsed: the body with the shared elements cut out::

    {"model":"m","messages":[m0,m1,m2],"tools":[...]}          the previous body
    {"model":"m","messages":[m0,m1,m2,m3,m4],"tools":[...]}    this body
    {"model":"m","messages":[m3,m4],"tools":[...]}              parsed now

What keeps this exact:

* Shared bytes are compared, never assumed: an edited, reordered or re-serialised message
  ends the shared part before it, and everything from there on is parsed.
* The array's member name occurs once in a remembered body, and not at all in the part
  parsed anew, so a second member of that name (the last one wins in a full parse) never
  meets a remembered prefix; and it is the top-level object's member (a remembered body
  closed right after the array's ``[`` parses). (A duplicate spelled with escapes,
  ``"m\\u0065ssages"``, is not caught: it can only change how its own sender's
  conversation reads.)
* A rollout's first body is not kept (it may be its only one): the short way starts at
  its third.
* Whatever the short way cannot vouch for (no shared message, an invalid tail, a body
  another thread is reading the memo for) is parsed whole, which also words every error.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel

from openforge.conversation import Message
from openforge.dialects.errors import ApiError, load_body, validate_body
from openforge.overlap import shared_prefix

__all__ = [
    "BodyMemo",
    "Parsed",
    "Resent",
    "extend",
    "learn",
    "messages_of",
    "parse_body",
    "resent",
    "value_end",
]

M = TypeVar("M", bound=BaseModel)

_STRUCT = re.compile(rb'["\[\]{}]')
_SPACE = b" \t\n\r"


def value_end(body: bytes, at: int) -> int:
    """The offset just past the JSON object, array or string starting at ``at`` (in a
    body already known to be valid JSON); ValueError when it is not one."""
    depth = 0
    pos = at
    while True:
        m = _STRUCT.search(body, pos)
        if m is None or (depth == 0 and m.start() != at):
            raise ValueError(f"no JSON object, array or string at byte {at}")
        c = body[m.start()]
        if c == 0x22:  # a string: skipped whole, brackets inside it are text
            pos = _string_end(body, m.start())
        else:
            pos = m.end()
            depth += 1 if c in b"[{" else -1
        if depth == 0:
            return pos


def _string_end(body: bytes, at: int) -> int:
    """The offset just past the JSON string whose opening quote is at ``at``: the next
    quote not escaped (preceded by an even run of backslashes), found by ``find``, which
    skips a long text at memchr speed where a pattern steps through its escapes."""
    pos = at + 1
    while True:
        quote = body.find(b'"', pos)
        if quote < 0:
            raise ValueError(f"unterminated string at byte {at}")
        back = quote - 1
        while body[back] == 0x5C:  # the opening quote stops this
            back -= 1
        if (quote - 1 - back) % 2 == 0:
            return quote + 1
        pos = quote + 1


def _skip_space(body: bytes, pos: int) -> int:
    while pos < len(body) and body[pos] in _SPACE:
        pos += 1
    return pos


@dataclass(frozen=True, slots=True)
class Parsed:
    """What one element of a body's array became: canonical messages (a wire message
    may become several, as Anthropic tool results do), and counts the dialect keeps of
    what it left out (summed over the conversation into its metadata)."""

    messages: tuple[Message, ...]
    counts: tuple[tuple[str, int], ...] = ()
    # False when a later element may still change what this one made (a Responses
    # function call joins the assistant message before it): a body is never split there.
    closed: bool = True


def messages_of(items: list[Parsed]) -> list[Message]:
    """The canonical messages of ``items``, in order."""
    return [m for item in items for m in item.messages]


@dataclass(slots=True)
class BodyMemo:
    """A rollout's last body in one dialect, and what each element of its array became."""

    # Sized for the cyclic GC, as a memo lives as long as its rollout: bytes and an
    # array of offsets, which it never walks; the converted messages are the only
    # objects kept.
    body: bytes = b""
    # Whether a body came before: a rollout's first body is not kept (many rollouts, a
    # judge's for one, make a single call), so the short way starts at its third.
    seen: bool = False
    opened: int = 0  # offset just past the array's "["
    ends: array[int] = field(default_factory=lambda: array("q"))  # past each element scanned
    items: list[Parsed] = field(default_factory=list)  # each element, converted
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(slots=True)
class Resent:
    """A body split at the end of the messages it shares with the memo's body."""

    kept: list[Parsed]  # the shared elements, converted last time
    raw: dict[str, Any]  # the body parsed without them: its array holds the new elements


def resent(memo: BodyMemo, body: bytes, key: str) -> Resent | None:
    """Split ``body`` after the elements of its ``key`` array that the memo's body shares
    byte for byte; None when it shares none (parse it whole). The caller validates and
    converts ``raw`` (new elements are numbered from ``len(kept)``) and then calls
    :func:`learn`; called with the memo's lock held."""
    old = memo.body
    if not old or not memo.items:
        return None
    shared = shared_prefix(old, body)
    if shared < memo.opened:
        return None
    ends = memo.ends
    # Find (scanning the remembered body once per element, over the rollout's life) the
    # elements that end inside the shared bytes.
    try:
        while len(ends) < len(memo.items) and (ends[-1] if ends else memo.opened) < shared:
            pos = _skip_space(old, ends[-1] if ends else memo.opened)
            if ends:
                pos = _skip_space(old, pos + 1)  # past the "," between elements
            ends.append(value_end(old, pos))
    except ValueError:  # cannot happen in a body that parsed; parse this one whole
        return None
    kept = 0
    while kept < len(ends) and ends[kept] <= shared:
        kept += 1
    while kept > 0 and not memo.items[kept - 1].closed:
        kept -= 1
    if kept == 0:
        return None
    cut = _skip_space(body, ends[kept - 1])
    if cut >= len(body) or body[cut] not in b",]":
        return None
    rest = body[cut + 1 :] if body[cut] == 0x2C else body[cut:]
    if b'"' + key.encode() + b'"' in rest:
        return None
    try:  # the body with the shared elements cut out
        raw = orjson.loads(body[: memo.opened] + rest)
    except orjson.JSONDecodeError:
        return None  # parsed whole, the error is reported where it is
    if not isinstance(raw, dict):
        return None
    return Resent(memo.items[:kept], raw)


def _member_value(body: bytes, key: bytes) -> int | None:
    """Where the value of the member named ``key`` starts, when its name occurs once in
    ``body`` (spelled plainly) and as a member's name; None otherwise.

    A ``{`` or ``,`` before the quoted name and a ``:`` after it make it a name: inside a
    string every quote is escaped. Whether it is the top-level member :func:`learn`
    checks."""
    quoted = b'"' + key + b'"'
    at = body.find(quoted)
    if at < 0 or body.find(quoted, at + 1) >= 0:
        return None
    before = at - 1
    while before >= 0 and body[before] in _SPACE:
        before -= 1
    colon = _skip_space(body, at + len(quoted))
    if before < 0 or body[before] not in b"{," or body[colon : colon + 1] != b":":
        return None
    return _skip_space(body, colon + 1)


def learn(memo: BodyMemo, body: bytes, key: str, items: list[Parsed]) -> None:
    """Remember ``body`` (parsed whole, its array converted to ``items``), or forget the
    memo when ``body``'s array cannot be found by its bytes."""
    if not memo.seen:
        memo.seen = True
        return
    at = _member_value(body, key.encode())
    if at is None or body[at : at + 1] != b"[" or not _top_level(body, at + 1):
        memo.body, memo.items, memo.ends = b"", [], array("q")
        return
    memo.body, memo.opened, memo.ends, memo.items = body, at + 1, array("q"), items


def _top_level(body: bytes, opened: int) -> bool:
    """Whether the array opened just before ``opened`` is a member of the top-level object:
    closed right there, the body then parses."""
    try:
        orjson.loads(body[:opened] + b"]}")
    except orjson.JSONDecodeError:
        return False
    return True


def extend(memo: BodyMemo, body: bytes, split: Resent, items: list[Parsed]) -> None:
    """Remember ``body``, parsed through ``split`` into ``items`` (kept ones first)."""
    kept = len(split.kept)
    memo.body, memo.ends, memo.items = body, memo.ends[:kept], items


def parse_body(
    body: bytes,
    memo: BodyMemo | None,
    key: str,
    model: type[M],
    union_tags: frozenset[str],
    convert: Callable[[M, list[Parsed]], list[Parsed]],
) -> tuple[M, list[Parsed]]:
    """``body`` validated as ``model``, and what each element of its ``key`` array became:
    ``convert(request, kept)`` turns the request's array, whose elements follow the
    ``kept`` ones, into ``kept`` plus one :class:`Parsed` each. Through ``memo`` (a
    rollout's, updated) only the elements after those a resent body shares are parsed;
    without it, or when another thread holds it, or whatever the short way cannot vouch
    for, the body is parsed whole, which also words its errors."""
    held = memo if memo is not None and memo.lock.acquire(blocking=False) else None
    try:
        split = resent(held, body, key) if held is not None else None
        if split is not None:
            try:
                req = validate_body(split.raw, model, union_tags=union_tags)
                items = convert(req, split.kept)
            except ApiError:
                split = None  # parsed whole below, which words the error as the body has it
        if split is None:
            req = validate_body(load_body(body), model, union_tags=union_tags)
            items = convert(req, [])
        if held is not None:
            if split is None:
                learn(held, body, key, items)
            else:
                extend(held, body, split, items)
        return req, items
    finally:
        if held is not None:
            held.lock.release()
