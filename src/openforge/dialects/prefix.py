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

A harness also sends its tools alike on every call (10-60 KB of JSON schemas: half the
agent body of the gateway bench), in every rollout. A :class:`KnownMember` keeps, for the
whole process, the values of such a top-level member that earlier bodies spelled exactly
as ``orjson`` writes them, validated and converted once: a body holding one of those byte
strings as the value of a member of that name is parsed with a marker in its place, and
the marker must come back as the member of the parsed top-level object (a value nested
elsewhere under the same name, or a later duplicate, does not), else the body is parsed
whole.
"""

from __future__ import annotations

import re
import secrets
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel

from openforge.conversation import Message
from openforge.dialects.errors import ApiError, load_body, validate_body
from openforge.overlap import shared_prefix

__all__ = [
    "BodyMemo",
    "KnownMember",
    "Parsed",
    "Resent",
    "extend",
    "forget_known_members",
    "indexed",
    "learn",
    "messages_of",
    "parse_body",
    "resent",
    "value_end",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

_STRUCT = re.compile(rb'["\[\]{}]')
_SPACE = b" \t\n\r"


def value_end(body: bytes, at: int, limit: int) -> int | None:
    """The offset just past the JSON object, array or string starting at ``at`` (in a
    body already known to be valid JSON), looking no further than ``limit``: None when
    it does not end by then; ValueError when no such value starts at ``at``."""
    depth = 0
    pos = at
    while True:
        m = _STRUCT.search(body, pos, limit)
        if m is None:
            return None
        if depth == 0 and m.start() != at:
            raise ValueError(f"no JSON object, array or string at byte {at}")
        c = body[m.start()]
        if c == 0x22:  # a string: skipped whole, brackets inside it are text
            end = _string_end(body, m.start(), limit)
            if end is None:
                return None
            pos = end
        else:
            pos = m.end()
            depth += 1 if c in b"[{" else -1
        if depth == 0:
            return pos


def _string_end(body: bytes, at: int, end: int) -> int | None:
    """The offset just past the JSON string whose opening quote is at ``at`` (None when
    it does not close before ``end``): the next quote not escaped (preceded by an even
    run of backslashes), found by ``find``, which skips a long text at memchr speed where
    a pattern steps through its escapes."""
    pos = at + 1
    while True:
        quote = body.find(b'"', pos, end)
        if quote < 0:
            return None
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
    # What the element was, when its messages alone do not say (Responses marks the
    # summary a compaction item became with the response it came from): kept with the
    # element when a resent body's leading elements are taken from the memo.
    note: str | None = None


def messages_of(items: list[Parsed]) -> list[Message]:
    """The canonical messages of ``items``, in order."""
    return [m for item in items for m in item.messages]


def indexed(items: list[Parsed]) -> Iterator[tuple[int | None, Message]]:
    """The canonical messages of ``items``, each with the index of the element (the wire
    message or item) that made it."""
    for i, item in enumerate(items):
        for m in item.messages:
            yield i, m


@dataclass(slots=True)
class BodyMemo:
    """A rollout's last body in one dialect, and what each element of its array became."""

    # Sized for the cyclic GC, as a memo lives as long as its rollout: bytes and an
    # array of offsets, which it never walks; the converted messages are the only
    # objects kept. A rollout's first body is not kept (many rollouts, a judge's for
    # one, make a single call), so the short way starts at its third, and until a body
    # is kept the memo is this one object: the array, the list and the lock are made
    # with the second body (at 256 calls in flight, each a new rollout's, what every
    # young collection walks is mostly such state).
    body: bytes = b""
    seen: bool = False  # whether a body came before
    opened: int = 0  # offset just past the array's "["
    ends: array[int] | None = None  # past each element scanned
    items: list[Parsed] | None = None  # each element, converted
    lock: threading.Lock | None = None  # held while a body is parsed through the memo


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
    old, items, ends = memo.body, memo.items, memo.ends
    if not old or not items or ends is None:
        return None
    shared = shared_prefix(old, body)
    if shared < memo.opened:
        return None
    # Find (scanning the remembered body once per element, over the rollout's life) the
    # elements that end inside the shared bytes. An element is scanned no further than
    # the shared bytes: one this body changed (a sibling call's new tool result, the
    # message Claude Code took its cache marker from) is not kept whatever its end.
    try:
        while len(ends) < len(items) and (ends[-1] if ends else memo.opened) < shared:
            pos = _skip_space(old, ends[-1] if ends else memo.opened)
            if ends:
                pos = _skip_space(old, pos + 1)  # past the "," between elements
            end = value_end(old, pos, shared)
            if end is None:
                break
            ends.append(end)
    except ValueError:  # cannot happen in a body that parsed; parse this one whole
        return None
    kept = 0
    while kept < len(ends) and ends[kept] <= shared:
        kept += 1
    while kept > 0 and not items[kept - 1].closed:
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
    return Resent(items[:kept], raw)


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
    return _value_after_name(body, at, len(quoted))


def _member_values(body: bytes, key: bytes) -> list[int]:
    """Where the value of each member named ``key`` (spelled plainly) starts, at any
    depth: a namespaced tool of Codex's has a ``tools`` member of its own."""
    quoted = b'"' + key + b'"'
    found = []
    at = body.find(quoted)
    while at >= 0:
        value = _value_after_name(body, at, len(quoted))
        if value is not None:
            found.append(value)
        at = body.find(quoted, at + len(quoted))
    return found


def _value_after_name(body: bytes, at: int, length: int) -> int | None:
    """Where the value starts of the member whose quoted name (``length`` bytes) is at
    ``at``; None when those bytes are not a member's name."""
    before = at - 1
    while before >= 0 and body[before] in _SPACE:
        before -= 1
    colon = _skip_space(body, at + length)
    if before < 0 or body[before] not in b"{," or body[colon : colon + 1] != b":":
        return None
    return _skip_space(body, colon + 1)


def learn(memo: BodyMemo, body: bytes, key: str, items: list[Parsed]) -> None:
    """Remember ``body`` (parsed whole, its array converted to ``items``), or forget the
    memo when ``body``'s array cannot be found by its bytes."""
    at = _member_value(body, key.encode())
    if at is None or body[at : at + 1] != b"[" or not _top_level(body, at + 1):
        memo.body, memo.items, memo.ends = b"", None, None
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
    assert memo.ends is not None  # split through it
    memo.body, memo.ends, memo.items = body, memo.ends[:kept], items


@dataclass(frozen=True, slots=True)
class _Known(Generic[T]):
    raw: bytes  # the member's value, as orjson writes it and the body spelled it
    value: object  # validated, as the request model holds it
    derived: T  # what the dialect made of it


@dataclass(frozen=True, slots=True)
class _Cut(Generic[T]):
    body: bytes  # the body with a marker for the member's value
    known: _Known[T]


class KnownMember(Generic[M, T]):
    """The values of a body's top-level member ``name`` (``tools``) that harnesses send
    alike on every call, validated and converted once and found again by their bytes.

    ``value`` reads the validated member from a request; ``derive`` makes the dialect's
    form of it (read-only, shared by every call that sends those bytes). At most ``size``
    values are kept, each at most ``max_bytes`` long."""

    def __init__(
        self,
        name: str,
        value: Callable[[M], object],
        derive: Callable[[M], T],
        *,
        size: int = 64,
        max_bytes: int = 1 << 18,
    ) -> None:
        self.name = name
        self.value = value
        self.derive = derive
        self.size = size
        self.max_bytes = max_bytes
        self._key = name.encode()
        # Unguessable, so no body can spell it: it stands for the member while the rest
        # of the body parses, and finding it back is what says the member was top-level.
        self._marker = "openforge:" + secrets.token_hex(16)
        self._marker_json = orjson.dumps(self._marker)
        self._by_head: dict[bytes, list[_Known[T]]] = {}
        self._count = 0
        self._lock = threading.Lock()
        _known_members.add(self)

    def forget(self) -> None:
        """Drop every kept value."""
        with self._lock:
            self._by_head.clear()
            self._count = 0

    def cut(self, body: bytes) -> _Cut[T] | None:
        """``body`` with a marker in place of the first known value of a member of the
        name, at any depth (:meth:`found` tells whether it was the top-level one); None
        when it holds none."""
        for at in _member_values(body, self._key):
            for known in self._by_head.get(body[at : at + _HEAD], ()):
                end = at + len(known.raw)
                if body.startswith(known.raw, at) and _member_ends(body, end):
                    return _Cut(body[:at] + self._marker_json + body[end:], known)
        return None

    def found(self, raw: dict[str, Any]) -> bool:
        """Whether the marker came back as the parsed body's own member."""
        marker = raw.get(self.name)
        return isinstance(marker, str) and marker == self._marker

    def learn(self, body: bytes, raw: dict[str, Any], request: M) -> T:
        """The dialect's form of ``request``'s member, kept when ``body`` (which parsed as
        ``raw`` and validated as ``request``) spells it as orjson writes it."""
        derived = self.derive(request)
        value = raw.get(self.name)
        if not isinstance(value, list) or not value:
            return derived
        spelled = orjson.dumps(value)
        if len(spelled) > self.max_bytes or not any(
            body.startswith(spelled, at) and _member_ends(body, at + len(spelled))
            for at in _member_values(body, self._key)
        ):
            return derived
        known = _Known(spelled, self.value(request), derived)
        with self._lock:
            if self._count >= self.size:  # a harness sends a handful; anything else churns
                self._by_head.clear()
                self._count = 0
            same = self._by_head.setdefault(spelled[:_HEAD], [])
            if all(k.raw != spelled for k in same):
                same.append(known)
                self._count += 1
        return derived


_HEAD = 64  # leading bytes of a known value that index it
_known_members: weakref.WeakSet[KnownMember[Any, Any]] = weakref.WeakSet()


def forget_known_members() -> None:
    """Drop the values every :class:`KnownMember` keeps, so the next body of each is
    parsed whole (what a test compares the short ways with)."""
    for known in list(_known_members):
        known.forget()


def _member_ends(body: bytes, at: int) -> bool:
    """Whether an object's member ends at ``at``: a ``,`` or ``}`` follows."""
    pos = _skip_space(body, at)
    return body[pos : pos + 1] in (b",", b"}")


def parse_body(
    body: bytes,
    memo: BodyMemo | None,
    key: str,
    model: type[M],
    union_tags: frozenset[str],
    convert: Callable[[M, list[Parsed]], list[Parsed]],
    known: KnownMember[M, T],
) -> tuple[M, list[Parsed], T]:
    """``body`` validated as ``model``, what each element of its ``key`` array became,
    and ``known``'s form of its member: ``convert(request, kept)`` turns the request's
    array, whose elements follow the ``kept`` ones, into ``kept`` plus one
    :class:`Parsed` each. Through ``memo`` (a rollout's, updated) only the elements
    after those a resent body shares are parsed, and a member value ``known`` has seen
    is not parsed again; without them, or when another thread holds the memo, or
    whatever the short way cannot vouch for, the body is parsed whole, which also words
    its errors."""
    held = _hold(memo) if memo is not None else None
    try:
        cut = known.cut(body)
        if cut is not None:
            members = {known.name: cut.known.value}

            def with_member(raw: dict[str, Any]) -> M:
                return validate_body(raw, model, union_tags=union_tags, members=members)

            try:
                short = _parse(cut.body, held, key, with_member, convert, known.found)
            except ApiError:
                short = None  # parsed as sent below, which words the error as the body has it
            if short is not None:
                return short[0], short[1], cut.known.derived

        def plain(raw: dict[str, Any]) -> M:
            return validate_body(raw, model, union_tags=union_tags)

        whole = _parse(body, held, key, plain, convert, lambda raw: True)
        assert whole is not None  # every parsed body is accepted
        req, items, raw = whole
        return req, items, known.learn(body, raw, req)
    finally:
        if held is not None and held.lock is not None:
            held.lock.release()


# Makes memos' locks: a memo's second body may parse on a worker thread while another
# body of the rollout parses on the event loop.
_MAKING_LOCK = threading.Lock()


def _hold(memo: BodyMemo) -> BodyMemo | None:
    """``memo``, its lock acquired, to parse a body through; None when the body is to be
    parsed whole: a rollout's first (which is not kept, so it leaves the memo as small
    as it came), or one while another thread holds the memo."""
    if not memo.seen:
        memo.seen = True
        return None
    lock = memo.lock
    if lock is None:
        with _MAKING_LOCK:
            lock = memo.lock
            if lock is None:
                lock = memo.lock = threading.Lock()
    return memo if lock.acquire(blocking=False) else None


def _parse(
    text: bytes,
    memo: BodyMemo | None,
    key: str,
    validate: Callable[[dict[str, Any]], M],
    convert: Callable[[M, list[Parsed]], list[Parsed]],
    accept: Callable[[dict[str, Any]], bool],
) -> tuple[M, list[Parsed], dict[str, Any]] | None:
    """``text`` validated and converted, and the object it parsed to: through ``memo``
    (held, when given; updated) when the body shares elements with its last one and
    the rest validates, else whole. None when ``accept`` refuses the parsed object
    (the short way's marker was not its member); a whole parse's error is raised."""
    split = resent(memo, text, key) if memo is not None else None
    if split is not None and accept(split.raw):
        try:
            req = validate(split.raw)
            items = convert(req, split.kept)
        except ApiError:
            split = None  # parsed whole below, which words the error as the body has it
    else:
        split = None
    if split is None:
        raw = load_body(text)
        if not accept(raw):
            return None
        req = validate(raw)
        items = convert(req, [])
    else:
        raw = split.raw
    if memo is not None:
        if split is None:
            learn(memo, text, key, items)
        else:
            extend(memo, text, split, items)
    return req, items, raw
