"""What one rollout has sampled so far, so later prompts reuse its exact tokens.

The gateway keeps one :class:`RolloutHistory` per rollout in memory and calls
:meth:`RolloutHistory.record` after every call. Each call's prompt is a list of segments
(one per message, or per run of tool results); a segment's identity is its key, and a
path hash over the keys tells which earlier call a new prompt extends.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from openforge.conversation import Message
from openforge.rendering.toolformat import canonical_arguments, content_text

if TYPE_CHECKING:
    from openforge.rendering.renderer import Renderer

__all__ = ["DriftPoint", "RenderedPrompt", "RolloutHistory", "Segment", "Turn"]

TurnKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(slots=True)
class Segment:
    key: Hashable
    ids: list[int]
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
    images: int = 0  # images replaced by a text placeholder
    parent: int | None = None  # index (in the history) of the call this prompt extends
    segments: list[Segment] = field(default_factory=list, repr=False)
    path_hash: int = field(default=0, repr=False)  # over all segments but the generation prompt


@dataclass(slots=True)
class Turn:
    """A reply the engine sampled, closed as the template closes a turn."""

    index: int  # the call that produced it
    segment_ids: list[int]  # generation prompt + output (+ end of turn) + turn separator
    closed_ids: list[int]  # the output, ending with the end-of-turn id
    message: Message
    prompt_hash: int
    # -1 until computed: only a turn the harness sends back needs it, and computing it
    # re-tokenizes the reply, which would otherwise sit on every call's answer path.
    _drift_at: int | None = field(default=-1, repr=False)

    def drift_at(self, renderer: Renderer) -> int | None:
        """Offset in the output where re-tokenizing its text differs from the sampled ids."""
        if self._drift_at == -1:
            m = self.message
            text = content_text(m.content)[0]
            reply = renderer.encode_reply(text, m.reasoning, m.tool_calls, validate=False)
            closed = self.closed_ids
            self._drift_at = next(
                (i for i, (a, b) in enumerate(zip(closed, reply, strict=False)) if a != b),
                None if len(closed) == len(reply) else min(len(closed), len(reply)),
            )
        return self._drift_at


def _text_of(message: Message) -> str:
    return content_text(message.content)[0].strip()


def fast_key(message: Message) -> TurnKey:
    """Match key on text and calls as sent; ids never appear in tokens, so they are left out."""
    return _text_of(message), tuple((c.name, c.arguments.strip()) for c in message.tool_calls)


def canonical_key(message: Message) -> TurnKey:
    """Like :func:`fast_key` with arguments compared as parsed JSON (harnesses re-serialize)."""
    calls = tuple((c.name, canonical_arguments(c.arguments)) for c in message.tool_calls)
    return _text_of(message), calls


@dataclass(slots=True)
class _Call:
    keys: list[Hashable]
    turn: Turn


class RolloutHistory:
    """Per-rollout memory: recorded replies, segment ids, and which prompts were sampled."""

    def __init__(self, renderer: Renderer) -> None:
        self._renderer = renderer
        self.calls: list[_Call] = []
        self.segment_cache: dict[Hashable, list[int]] = {}
        self._tips: dict[int, int] = {}
        self._fast: dict[TurnKey, list[Turn]] = {}
        self._canon: dict[TurnKey, list[Turn]] = {}
        self.drift_count = 0
        self.fork_count = 0

    def record(self, prompt: RenderedPrompt, output_ids: list[int], message: Message) -> Turn:
        """Remember a call: its prompt, the ids the engine sampled, the message they parsed to."""
        r = self._renderer
        closed = list(output_ids)
        if not closed or closed[-1] != r.end_id:
            closed.append(r.end_id)
        turn = Turn(
            index=len(self.calls),
            segment_ids=r.generation_ids + closed + r.turn_separator_ids,
            closed_ids=closed,
            message=message,
            prompt_hash=prompt.path_hash,
        )
        segs = [s for s in prompt.segments if s.kind != "generation"]
        self.calls.append(_Call([s.key for s in segs], turn))
        self._tips[hash((prompt.path_hash, ("turn", turn.index)))] = turn.index
        self._fast.setdefault(fast_key(message), []).append(turn)
        self._canon.setdefault(canonical_key(message), []).append(turn)
        self.drift_count += len(prompt.drift)
        self.fork_count += prompt.fork
        return turn

    def find_turn(self, message: Message, path_hash: int) -> Turn | None:
        """The recorded reply this assistant message re-sends, if any."""
        found = self._fast.get(fast_key(message)) or self._canon.get(canonical_key(message))
        if not found:
            return None
        wanted = (message.reasoning or "").strip()
        fits = [t for t in found if not wanted or wanted == (t.message.reasoning or "").strip()]
        for t in reversed(fits):
            if t.prompt_hash == path_hash:
                return t
        return fits[-1] if fits else None

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
        keys = [*last.keys, ("turn", last.turn.index)]
        segs = [s for s in segments if s.kind != "generation"]
        for j, seg in enumerate(segs):
            if j >= len(keys):
                break
            if seg.key == keys[j]:
                continue
            where = f"message {seg.message_index} ({seg.kind})"
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
