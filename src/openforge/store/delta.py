"""A call stored relative to an earlier call of its rollout, so a row costs what is new.

An agent's call ``n`` re-sends calls ``0 … n-1``: the same system prompt, tools and history
with one more turn. Stored whole, every row carries the whole conversation three times
(prompt ids, raw body, canonical conversation), and the cost of recording a call (zstd,
id packing, the SQLite or PostgreSQL write and its WAL) grows with the history: measured
at ~10 ms of gateway CPU per call at turn 48 of a 177 KB conversation against ~5 ms at
turn 1 (docs/gateway.md). Stored against its *base* — the last call of the same rollout
and role this store recorded — a row keeps only:

* the prompt ids past the ones it shares with the base's ``prompt_ids + output_ids``
  (an extension of the base, as the rendering made it, shares all of them);
* the raw request and the canonical conversation JSON as the bytes between the prefix and
  the suffix they share with the base's (the new messages; tools and settings that follow
  the messages in a body are in the shared suffix).

A call with no base of its own (a rollout's first call, a new sub-agent's) is stored
against a *root* when one shares enough: one of the last whole rows of its role, whichever
shares the longest start of its prompt ids. Rollouts of one harness start alike (its
system prompt and tools, and in a group the task too), so most first calls then keep
only what follows. A root is whole, so a row is never more than one step from another
rollout's.

The ``delta`` column says which base and how much of each is shared; a row without it is
whole. Nothing about the wire format is assumed: any bytes or ids are reconstructed
exactly (``base[:prefix] + middle + base[len(base) - suffix:]``), and a base that shares
little (a fork, a judge's first call) is simply not used. Reading a rollout's calls
resolves the chain in one pass (with the roots its rows name, read by id); reading one
call resolves its ancestors.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from openforge.overlap import shared_prefix, shared_suffix
from openforge.store.errors import StoreError
from openforge.store.schemas import CallRole

__all__ = [
    "ROOT_MAX_BYTES",
    "Bases",
    "Delta",
    "StoredBase",
    "base_ids",
    "best_root",
    "choose_delta",
    "ids_text",
    "joined_text",
    "resolve_order",
    "splice",
]

# A delta is used when it leaves out at least this share of the call's bytes (and 1 KB):
# below that the base is unrelated (a fork, a new sub-agent) and the row is stored whole.
_MIN_SHARED = 0.25
_MIN_SAVED = 1024


@dataclass(frozen=True, slots=True)
class StoredBase:
    """What a call's successor is stored against: its ids and bytes, in full.

    The ids are kept as the text of their JSON array (prompt, then output, no brackets:
    :func:`ids_text`). The gateway hands a call's prompt over as that text already (it
    made it for the engine from pieces it keeps per segment), so comparing a call with
    its base is a ``memcmp`` of two byte strings, where tuples of 50k ids meant copying
    (and touching) every id object on every call. Bytes are no work for the cyclic GC
    either, which walked lists of ids element by element.
    """

    id: str
    ids_text: bytes
    ids_count: int  # how many ids ids_text holds (prompt + output)
    raw: bytes
    conversation: bytes  # the canonical conversation's JSON as stored
    # Stored whole, with a prompt: a root other rollouts' first calls may be stored against.
    root: bool = False


def ids_text(ids: Sequence[int]) -> bytes:
    """``ids`` as the text of a JSON array without its brackets (``1,2,3``)."""
    return orjson.dumps(list(ids) if not isinstance(ids, list) else ids)[1:-1]


def joined_text(first: bytes, second: bytes) -> bytes:
    """The text of ``first``'s ids followed by ``second``'s."""
    return first + b"," + second if first and second else first or second


@dataclass(frozen=True, slots=True)
class Delta:
    """How a row relates to its base: shared ids, and shared (prefix, suffix) bytes."""

    base: str
    prompt_ids: int
    raw: tuple[int, int]
    conversation: tuple[int, int]

    def to_json(self) -> bytes:
        """The ``delta`` column."""
        return orjson.dumps(
            {
                "base": self.base,
                "prompt_ids": self.prompt_ids,
                "raw": self.raw,
                "conversation": self.conversation,
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str, call_id: str) -> Delta:
        """The ``delta`` column read back; StoreError naming the call when malformed."""
        try:
            d = orjson.loads(data)
            raw, conv = d["raw"], d["conversation"]
            return cls(
                str(d["base"]), int(d["prompt_ids"]), (int(raw[0]), int(raw[1])),
                (int(conv[0]), int(conv[1])),
            )  # fmt: skip
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise StoreError(f"call {call_id}: unreadable delta column: {exc!r}") from None


def _ends(base: bytes, new: bytes) -> tuple[int, int]:
    p = shared_prefix(base, new)
    return p, shared_suffix(base, new, min(len(base), len(new)) - p)


def splice(base: bytes, ends: tuple[int, int], middle: bytes, call_id: str) -> bytes:
    """``base[:prefix] + middle + base[len - suffix:]``; StoreError when ``ends`` do not fit."""
    p, s = ends
    if p < 0 or s < 0 or p + s > len(base):
        raise StoreError(f"call {call_id}: delta {ends} does not fit its base ({len(base)} B)")
    return base[:p] + middle + base[len(base) - s :]


def _shared_ids(prompt: bytes, prompt_tokens: int, base: StoredBase) -> int:
    """How many leading ids the prompt (as :func:`ids_text`) shares with the base's
    prompt + output: the ids whose text lies wholly in the shared bytes, each ended by a
    comma, or by the end of the text, in both."""
    text = base.ids_text
    n = shared_prefix(text, prompt)
    # The commas before byte n, counted from the (short) end: bytes.count steps through
    # every byte, and the shared part is nearly all of a long prompt.
    count = max(base.ids_count - 1, 0) - text.count(b",", n)
    if n and (n == len(text) or text[n] == 0x2C) and (n == len(prompt) or prompt[n] == 0x2C):
        count += 1  # the id ending at byte n ends there in both
    return min(count, prompt_tokens)


def choose_delta(
    base: StoredBase | None,
    call_id: str,
    prompt: bytes,
    prompt_tokens: int,
    raw: bytes,
    conversation: bytes,
) -> Delta | None:
    """The delta to store this call with (its prompt's ids as :func:`ids_text`), or None
    to store it whole."""
    if base is None or base.id == call_id:
        return None
    ids = _shared_ids(prompt, prompt_tokens, base)
    raw_ends, conv_ends = _ends(base.raw, raw), _ends(base.conversation, conversation)
    saved = 4 * ids + sum(raw_ends) + sum(conv_ends)
    total = 4 * prompt_tokens + len(raw) + len(conversation)
    if saved < _MIN_SAVED or saved < _MIN_SHARED * total:
        return None
    return Delta(base.id, ids, raw_ends, conv_ends)


def best_root(roots: Sequence[StoredBase], prompt: bytes) -> StoredBase | None:
    """The root whose ids share the longest start with ``prompt`` (a call's ids as
    :func:`ids_text`), None when none shares any. A ``memcmp`` bisection for the first
    root, and for each other one that shares more than the best so far."""
    best, shared = None, 0
    for root in roots:
        text = root.ids_text
        # One workload's roots mostly share the same start with a call (its system prompt
        # and tools): one memcmp of a byte past the best tells that a root cannot beat it.
        if best is not None and not prompt.startswith(memoryview(text)[: shared + 1]):
            continue
        n = shared_prefix(text, prompt)
        if n > shared:
            best, shared = root, n
    return best


def base_ids(ids: list[int], n: int, call_id: str) -> list[int]:
    """The first ``n`` of a base's ``prompt_ids + output_ids`` (``ids``)."""
    if n > len(ids):
        raise StoreError(f"call {call_id}: delta shares {n} ids, its base has fewer")
    return ids[:n]


# A whole row larger than this is no root: roots are kept for the store's life, and a
# huge one-off call (a 60 MB tool log) would hold its size there for good.
ROOT_MAX_BYTES = 4 << 20


def _size(base: StoredBase) -> int:
    return len(base.ids_text) + len(base.raw) + len(base.conversation)


class Bases:
    """The last call each (rollout, role) recorded through this store, for the next one's
    delta. Entries are put once a call is committed (a base is always durable), dropped
    when the rollout finishes, and the least recently used go past ``limit``."""

    def __init__(self, limit: int = 1024, roots: int = 8) -> None:
        self.limit = limit
        self.roots_limit = roots
        self._by: OrderedDict[tuple[str, str], StoredBase] = OrderedDict()
        # Per role, the last whole rows put, newest first. A row is whole only when no
        # root shared enough, so a workload's roots stay put once it has them; eight per
        # role hold several harnesses' (or prompt variants') at a few hundred KB each.
        self._roots: dict[str, tuple[StoredBase, ...]] = {}

    def get(self, rollout_id: str, role: str) -> StoredBase | None:
        """The base for the next call of ``rollout_id`` in ``role``, if one is held."""
        return self._by.get((rollout_id, role))

    def roots(self, role: str) -> tuple[StoredBase, ...]:
        """Whole rows of ``role`` a call without a base of its own may be stored against."""
        return self._roots.get(role, ())

    def put(self, rollout_id: str, role: str, base: StoredBase) -> None:
        """Hold ``base`` as the next call's (the newest commit wins), and as a root of its
        role when it may be one."""
        key = (rollout_id, role)
        self._by[key] = base
        self._by.move_to_end(key)
        while len(self._by) > self.limit:
            self._by.popitem(last=False)
        if base.root and self.roots_limit and _size(base) <= ROOT_MAX_BYTES:
            self._roots[role] = (base, *self._roots.get(role, ()))[: self.roots_limit]

    def drop(self, rollout_id: str) -> None:
        """Forget a finished rollout's bases."""
        # One look-up per role, not a scan of every rollout's (~20 us at 1,024 held, for
        # each of a training step's rollouts as it finishes).
        for role in CallRole:
            self._by.pop((rollout_id, role), None)


def resolve_order(ids: Sequence[str], bases: Sequence[str | None]) -> list[int]:
    """Row indices in an order where each row's base (when among the rows) comes first."""
    index = {call_id: i for i, call_id in enumerate(ids)}
    done: set[int] = set()
    order: list[int] = []
    for start in range(len(ids)):
        chain: list[int] = []
        seen: set[int] = set()
        i: int | None = start
        while i is not None and i not in done and i not in seen:
            chain.append(i)
            seen.add(i)
            b = bases[i]
            i = index.get(b) if b is not None else None
        for j in reversed(chain):
            done.add(j)
            order.append(j)
    return order
