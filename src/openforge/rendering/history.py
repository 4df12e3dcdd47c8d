"""What one rollout has sampled so far, so later prompts reuse its exact tokens.

The gateway keeps one :class:`RolloutHistory` per rollout in memory and calls
:meth:`RolloutHistory.record` after every call. Each call's prompt is a list of segments
(one per message, or per run of tool results); a segment's identity is its key, and a
path hash over the keys tells which earlier call a new prompt extends.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from openforge.conversation import ImagePart, Message, ToolCall
from openforge.rendering.toolformat import canonical_arguments, content_text
from openforge.rendering.untracked import untracked

__all__ = [
    "DriftPoint",
    "HistoryRenderer",
    "LastRender",
    "RenderedPrompt",
    "RolloutHistory",
    "Segment",
    "Turn",
]

TurnKey = tuple[str, tuple[tuple[str, str], ...]]


class HistoryRenderer(Protocol):
    """What a rollout's history needs of its renderer (``Renderer`` is one): how a turn is
    framed, the ids shared between rollouts, a reply re-encoded. Named here, below
    ``renderer.py``, so the history need not import the renderer that owns it."""

    end_id: int
    turn_end_ids: frozenset[int]
    generation_ids: list[int]
    turn_separator_ids: list[int]

    def encode_reply(
        self, text: str, reasoning: str | None, tool_calls: list[ToolCall] | None, *, validate: bool
    ) -> list[int]: ...

    def shared_json(self, key: Hashable, ids: Sequence[int]) -> bytes | None: ...


@dataclass(slots=True)
class Segment:
    key: Hashable
    ids: Sequence[int]
    message_index: int  # first message it renders; -1 for the generation prompt
    kind: str  # system | user | tool | assistant (from text) | reply (recorded ids) | ...
    fresh: bool  # tokenized during this call


@dataclass(slots=True)
class DriftPoint:
    """A re-sent reply whose text, tokenized afresh, would part from the sampled ids."""

    message_index: int
    position: int  # prompt index of the first token that differs


@dataclass(slots=True)
class RenderedPrompt:
    ids: list[int]
    # True when this prompt does not extend any earlier call's prompt + output in the rollout
    fork: bool = False
    fork_reason: str | None = None
    # prompt tokens taken from caches or recorded outputs rather than tokenized now
    reused_tokens: int = 0
    drift: list[DriftPoint] = field(default_factory=list)
    images: int = 0  # images replaced by a text placeholder (a text-only model)
    # images the prompt shows a VLM, in prompt order (their placeholders are expanded)
    image_parts: list[ImagePart] = field(default_factory=list, repr=False)
    parent: int | None = None  # index (in the history) of the call this prompt extends
    segments: list[Segment] = field(default_factory=list, repr=False)
    path_hash: int = field(default=0, repr=False)  # over all segments but the generation prompt
    # ``ids`` as a JSON array, made from each segment's JSON (see RolloutHistory.ids_json);
    # None when rendered without a history
    ids_json: bytes | None = field(default=None, repr=False)


@dataclass(slots=True)
class LastRender:
    """A rollout's last render, per segment, for the next render to take its leading
    segments from (``Renderer.render``): lists aligned with ``segments`` (a trailing
    prefill is left out)."""

    segments: list[Segment]
    hashes: list[int]  # path hash after each segment
    ends: list[int]  # message index after each segment
    images: list[int]  # ``RenderedPrompt.images`` after each segment
    parts: list[int]  # ``len(RenderedPrompt.image_parts)`` after each segment
    drift: list[DriftPoint]
    image_parts: list[ImagePart]
    task: int  # leading segments before the first reply (the task, alike across a group)
    calls: int  # turns recorded when it was made
    # Re-sent assistant messages whose segment a turn recorded since could change (see
    # RolloutHistory.lookup_turn): segment index, match key and canonical match key.
    unsure: list[tuple[int, TurnKey, TurnKey]]


# A history lives as long as its rollout and grows by a Turn per call, so everything a
# Turn holds is sized for the cyclic GC: ids and keys are tuples (CPython stops tracking a
# tuple of atomic values; the ids are untracked as soon as made, rendering/untracked.py)
# and the reply is kept as strings rather than a Message with its lists.
# One tracked object per call where there were nine (bench/gateway_heap.py).
@dataclass(slots=True)
class Turn:
    """A call and the reply the engine sampled for it, closed as the template closes a turn."""

    index: int  # the call that produced it
    segment_ids: tuple[int, ...]  # generation prompt + output (+ end of turn) + turn separator
    keys: tuple[Hashable, ...]  # the keys of the prompt's segments, generation prompt left out
    text: str  # the reply as parsed: text, reasoning, tool calls as (name, arguments)
    reasoning: str | None
    calls: tuple[tuple[str, str], ...]
    prompt_hash: int
    _head: int = field(repr=False)  # length of the generation prompt in segment_ids
    _tail: int = field(repr=False)  # length of the turn separator
    # -1 until computed: only a turn the harness sends back needs it, and computing it
    # re-tokenizes the reply, which would otherwise sit on every call's answer path.
    _drift_at: int | None = field(default=-1, repr=False)

    @property
    def closed_ids(self) -> tuple[int, ...]:
        """The output, ending with the end-of-turn id."""
        return self.segment_ids[self._head : len(self.segment_ids) - self._tail]

    def drift_at(self, renderer: HistoryRenderer) -> int | None:
        """Offset in the output where re-tokenizing its text differs from the sampled ids."""
        if self._drift_at == -1:
            calls = [ToolCall("", name, args) for name, args in self.calls]
            reply = renderer.encode_reply(self.text, self.reasoning, calls, validate=False)
            closed = self.closed_ids
            self._drift_at = next(
                (i for i, (a, b) in enumerate(zip(closed, reply, strict=False)) if a != b),
                None if len(closed) == len(reply) else min(len(closed), len(reply)),
            )
        return self._drift_at


def _match_key(text: str, calls: Iterable[tuple[str, str]], args: Callable[[str], str]) -> TurnKey:
    """A reply's match key from its text and (name, arguments) calls, arguments through
    ``args``; a recorded Turn keeps exactly these, so its keys are made the same way."""
    return text.strip(), tuple((name, args(arguments)) for name, arguments in calls)


def fast_key(message: Message) -> TurnKey:
    """Match key on text and calls as sent; ids never appear in tokens, so they are left out."""
    calls = ((c.name, c.arguments) for c in message.tool_calls)
    return _match_key(content_text(message.content)[0], calls, str.strip)


def canonical_key(message: Message) -> TurnKey:
    """Like :func:`fast_key` with arguments compared as parsed JSON (harnesses re-serialize)."""
    calls = ((c.name, c.arguments) for c in message.tool_calls)
    return _match_key(content_text(message.content)[0], calls, canonical_arguments)


class _TurnIndex:
    """Turns by match key, fast or canonical: the latest of each key, overall and per
    prompt path, and the same per (key, reasoning) for turns that had reasoning. Every
    lookup is one dict get, in one dict for both kinds of key (a history lives as long
    as its rollout: few objects for the GC)."""

    __slots__ = ("_by",)

    def __init__(self) -> None:
        # (canonical, key) | (canonical, key, path_hash) | (canonical, key, reasoning, "r")
        # | (canonical, key, path_hash, reasoning)
        self._by: dict[tuple[object, ...], int] = {}

    def has(self, canonical: bool, key: TurnKey) -> bool:
        """Whether a turn has ``key`` (a canonical key when ``canonical``)."""
        return (canonical, key) in self._by

    def add(
        self, canonical: bool, key: TurnKey, path_hash: int, reasoning: str, index: int
    ) -> None:
        """Index turn ``index``, sampled at ``path_hash``, by ``key`` (later turns win)."""
        by = self._by
        by[(canonical, key)] = by[(canonical, key, path_hash)] = index
        if reasoning:
            by[(canonical, key, reasoning, "r")] = index
            by[(canonical, key, path_hash, reasoning)] = index

    def find(
        self, canonical: bool, key: TurnKey, path_hash: int, reasoning: str
    ) -> tuple[int | None, bool]:
        """The latest turn of ``key`` (with ``reasoning``, when given) sampled at
        ``path_hash``, else the latest one of them (None when there is none); and whether
        it was found at ``path_hash``."""
        by = self._by
        if reasoning:
            found = by.get((canonical, key, path_hash, reasoning))
            if found is None:
                return by.get((canonical, key, reasoning, "r")), False
            return found, True
        found = by.get((canonical, key, path_hash))
        return (by.get((canonical, key)), False) if found is None else (found, True)


def _dropped_images(before: Hashable, now: Hashable) -> int:
    """How many images a turn lost between two calls (0 when it is not that edit)."""
    if not (isinstance(before, tuple) and before and before[0] == "images"):
        return 0
    kept = now[2] if isinstance(now, tuple) and now and now[0] == "images" else ()
    lost = len(before[2]) - len(kept)
    return lost if lost > 0 and set(kept) <= set(before[2]) else 0


# Ids serialised per step (see _ids_json).
_IDS_STEP = 1 << 20


def _ids_json(ids: Sequence[int]) -> bytes:
    """``ids`` as JSON without brackets; a huge segment (a 60 MB tool log's 15 M ids) a
    step at a time, so no single call holds the GIL for most of a second (the same bytes:
    orjson writes ints without spaces)."""
    if len(ids) <= _IDS_STEP:
        return orjson.dumps(ids)[1:-1]
    return b",".join(
        orjson.dumps(ids[at : at + _IDS_STEP])[1:-1] for at in range(0, len(ids), _IDS_STEP)
    )


class RolloutHistory:
    """Per-rollout memory: recorded replies, segment ids, and which prompts were sampled."""

    def __init__(self, renderer: HistoryRenderer) -> None:
        self._renderer = renderer
        self.calls: list[Turn] = []  # by call index
        self.segment_cache: dict[Hashable, Sequence[int]] = {}
        self._tips: dict[int, int] = {}
        # How find_turn finds a reply, without scanning the turns: the latest turn of each
        # match key, and the latest sampled at each path; each also by reasoning, for a
        # message that re-sends its reasoning. (Tuples of indices per key, scanned, cost a
        # rollout whose agent says the same thing every turn time in its length per call.)
        self._turns = _TurnIndex()
        self.drift_count = 0
        self.fork_count = 0
        # The last render's messages, and its turns' texts by first message (see
        # Renderer._unit_text): tuples of an int, a str and an int, which the GC untracks.
        self.text_messages: Sequence[Message] = ()  # a tuple, untracked, until a second render
        self.texts: dict[int, tuple[int, str, int]] = {}
        self.last_render: LastRender | None = None
        # segment key -> (its ids object, those ids as JSON without brackets); see ids_json
        self._json: dict[Hashable, tuple[Sequence[int], bytes]] = {}

    def record(self, prompt: RenderedPrompt, output_ids: list[int], message: Message) -> Turn:
        """Remember a call: its prompt, the ids the engine sampled, the message they parsed to."""
        r = self._renderer
        end = () if output_ids and output_ids[-1] in r.turn_end_ids else (r.end_id,)
        index = len(self.calls)
        # Segments tokenized for this call stay cached for the rollout as they were made:
        # their lists are untracked already, so copying them into tuples buys nothing.
        segs = [s for s in prompt.segments if s.kind != "generation"]
        turn = Turn(
            index=index,
            segment_ids=untracked((*r.generation_ids, *output_ids, *end, *r.turn_separator_ids)),
            keys=tuple(s.key for s in segs),
            text=content_text(message.content)[0],
            reasoning=message.reasoning,
            calls=tuple((c.name, c.arguments) for c in message.tool_calls),
            prompt_hash=prompt.path_hash,
            _head=len(r.generation_ids),
            _tail=len(r.turn_separator_ids),
        )
        self.calls.append(turn)
        self._tips[hash((prompt.path_hash, ("turn", index)))] = index
        fast, canon = fast_key(message), canonical_key(message)
        reasoning = (message.reasoning or "").strip()
        self._turns.add(False, fast, prompt.path_hash, reasoning, index)
        self._turns.add(True, canon, prompt.path_hash, reasoning, index)
        self.drift_count += len(prompt.drift)
        self.fork_count += prompt.fork
        return turn

    def ids_json(self, segments: list[Segment]) -> bytes:
        """The prompt's ids (its segments' ids, in order) as one JSON array.

        An engine request carries the whole prompt, so serialising its ids afresh would
        cost each call time in proportion to the rollout's history. Each segment's JSON is
        made once and kept with the very ids object it was made from: it is used again
        only for that object (an identity check, so a segment whose ids changed is
        serialised again), and joining the pieces is a copy of bytes. A segment the
        renderer shares between rollouts (the system prompt and tools, a group's task) has
        its JSON made once for all of them, so a rollout's first call does not serialise
        its whole prompt either.
        """
        memo = self._json
        keep = bool(self.calls)  # a rollout's first prompt may be its only one
        pieces: list[bytes] = []
        for s in segments:
            if not s.ids:
                continue
            made = memo.get(s.key)
            if made is None or made[0] is not s.ids:
                shared = self._renderer.shared_json(s.key, s.ids)
                made = (s.ids, shared if shared is not None else _ids_json(s.ids))
                if keep and s.kind != "prefill":  # a prefill is never rendered twice
                    memo[s.key] = made
            pieces.append(made[1])
        return b"[" + b",".join(pieces) + b"]"

    def find_turn(self, message: Message, path_hash: int) -> Turn | None:
        """The recorded reply this assistant message re-sends, if any.

        Among the turns with its text and calls (and reasoning, when it has any): the
        latest one sampled at ``path_hash``, else the latest one. Its text and calls are
        matched as sent, or, when no turn matches so, with arguments compared as JSON.
        """
        return self.lookup_turn(message, path_hash)[0]

    def lookup_turn(self, message: Message, path_hash: int) -> tuple[Turn | None, bool]:
        """:meth:`find_turn`, and whether the answer is settled: found as sent at
        ``path_hash``. Only a turn recorded at that very path could change a settled
        answer; any other answer may change with the next recorded turn."""
        key = fast_key(message)
        settled = self._turns.has(False, key)
        if not settled:
            key = canonical_key(message)
        reasoning = (message.reasoning or "").strip()
        found, at_path = self._turns.find(not settled, key, path_hash, reasoning)
        return (None, False) if found is None else (self.calls[found], settled and at_path)

    def changed_since(self, last: LastRender) -> int:
        """How many of ``last``'s leading segments the turns recorded since it leave as
        they were: up to its first unsure reply whose match key a new turn has."""
        new = self.calls[last.calls :]
        if not new or not last.unsure:
            return len(last.hashes)
        fast = {_match_key(t.text, t.calls, str.strip) for t in new}
        canon = {_match_key(t.text, t.calls, canonical_arguments) for t in new}
        for at, fast_key_, canon_key in last.unsure:
            if fast_key_ in fast or canon_key in canon:
                return at
        return len(last.hashes)

    def parent_of(self, hashes: list[int]) -> int | None:
        """The call whose prompt + reply is the longest prefix of a path, if any."""
        for h in reversed(hashes):
            found = self._tips.get(h)
            if found is not None:
                return found
        return None

    def fork_reason(self, segments: list[Segment]) -> str:
        """Say where a prompt parts from the previous call's prompt + reply."""
        last = self.calls[-1]
        keys = [*last.keys, ("turn", last.index)]
        segs = [s for s in segments if s.kind != "generation"]
        for j, seg in enumerate(segs):
            if j >= len(keys):
                break
            if seg.key == keys[j]:
                continue
            where = f"message {seg.message_index} ({seg.kind})"
            dropped = _dropped_images(keys[j], seg.key)
            if dropped:
                return f"{where}: {dropped} image(s) dropped from history (screenshots pruned)"
            if j == 0:
                return "the system prompt or tool list changed"
            if j == len(keys) - 1:
                return f"{where} is not the previous call's reply"
            if seg.kind == "assistant":
                return f"assistant {where} does not match a reply sampled in this rollout"
            return f"{where} differs from the previous call's (edited, injected or compacted)"
        if len(segs) < len(keys):
            return "the conversation is shorter than the previous call's (compacted or truncated)"
        return "the prompt does not extend an earlier call's prompt and reply"
