"""Engine output ids → text, reasoning and tool calls, whole or as a stream of deltas.

One state machine serves both: :func:`parse` feeds every id at once, so a stream's
deltas concatenated always equal the final parse. Text is held back only while it could
still be the start of a tag (and whitespace that a following tool call would drop).

Whitespace rules (what a round trip through :func:`encode_reply` preserves): reasoning is
stripped; text right after ``</think>`` or ``</tool_call>`` loses its leading whitespace,
text right before a ``<tool_call>`` loses its trailing whitespace. A malformed call comes
back verbatim as text.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from openforge.conversation import (
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from openforge.rendering.tokenizer import Tokenizer
from openforge.rendering.toolformat import (
    CALL_CLOSE,
    CALL_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    parse_call,
)

__all__ = ["IdFactory", "ParsedOutput", "StreamParser", "default_id_factory", "parse"]

IdFactory = Callable[[], str]
_State = Literal["start", "reasoning", "text", "call"]


def default_id_factory() -> IdFactory:
    """``call_0``, ``call_1``, ... (callers normally pass their dialect's own factory)."""
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


@dataclass(slots=True)
class ParsedOutput:
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # <tool_call> blocks that were not a JSON object with a name and object arguments
    malformed: int = 0


def _partial_tag(buf: str, tag: str) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of ``tag``."""
    for j in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:j]):
            return j
    return 0


class StreamParser:
    """Incremental parser: ``feed`` ids as they arrive, ``flush`` at the end, then ``finish``."""

    def __init__(self, tokenizer: Tokenizer, id_factory: IdFactory | None = None) -> None:
        self._detok = tokenizer.detokenizer()
        self._ids = id_factory or default_id_factory()
        self._buf = ""
        self._state: _State = "start"
        self._strip_lead = False
        self._ws_before_call = ""
        self._text: list[str] = []
        self._reasoning: list[str] | None = None
        self._calls: list[ToolCall] = []
        self._malformed = 0
        self._flushed = False

    def feed(self, ids: list[int]) -> list[CompletionDelta]:
        """Consume newly sampled ids; return the deltas that are now certain."""
        self._buf += self._detok.feed(ids)
        out: list[CompletionDelta] = []
        self._drain(out, final=False)
        return out

    def flush(self) -> list[CompletionDelta]:
        """End of output: release everything held back."""
        if self._flushed:
            return []
        self._flushed = True
        self._buf += self._detok.flush()
        out: list[CompletionDelta] = []
        self._drain(out, final=True)
        return out

    def finish(self) -> ParsedOutput:
        """The whole parse (calls :meth:`flush` first if the caller did not)."""
        self.flush()
        reasoning = None if self._reasoning is None else "".join(self._reasoning)
        return ParsedOutput("".join(self._text), reasoning, list(self._calls), self._malformed)

    # The state machine: each step consumes from the buffer or returns False (needs more).

    def _drain(self, out: list[CompletionDelta], final: bool) -> None:
        step = {
            "start": self._step_start,
            "reasoning": self._step_reasoning,
            "text": self._step_text,
            "call": self._step_call,
        }
        while step[self._state](out, final):
            pass

    def _emit_text(self, out: list[CompletionDelta], piece: str) -> None:
        if self._strip_lead:
            piece = piece.lstrip()
        if piece:
            self._strip_lead = False
            self._text.append(piece)
            out.append(TextDelta(piece))

    def _emit_reasoning(self, out: list[CompletionDelta], piece: str) -> None:
        if self._strip_lead:
            piece = piece.lstrip()
        if piece:
            self._strip_lead = False
            assert self._reasoning is not None
            self._reasoning.append(piece)
            out.append(ReasoningDelta(piece))

    def _step_start(self, out: list[CompletionDelta], final: bool) -> bool:
        head = self._buf.lstrip()
        if head.startswith(THINK_OPEN):
            self._buf = head[len(THINK_OPEN) :]
            self._state, self._strip_lead, self._reasoning = "reasoning", True, []
            return True
        if not final and THINK_OPEN.startswith(head):
            return False
        self._state = "text"
        return True

    def _step_reasoning(self, out: list[CompletionDelta], final: bool) -> bool:
        idx = self._buf.find(THINK_CLOSE)
        if idx >= 0:
            self._emit_reasoning(out, self._buf[:idx].rstrip())
            self._buf = self._buf[idx + len(THINK_CLOSE) :]
            self._state, self._strip_lead = "text", True
            return True
        if final:
            self._emit_reasoning(out, self._buf.rstrip())
            self._buf = ""
            return False
        cut = len(self._buf) - _partial_tag(self._buf, THINK_CLOSE)
        cut = len(self._buf[:cut].rstrip())
        self._emit_reasoning(out, self._buf[:cut])
        self._buf = self._buf[cut:]
        return False

    def _step_text(self, out: list[CompletionDelta], final: bool) -> bool:
        idx = self._buf.find(CALL_OPEN)
        if idx >= 0:
            before = self._buf[:idx]
            kept = before.rstrip()
            self._emit_text(out, kept)
            self._ws_before_call = before[len(kept) :]
            self._buf = self._buf[idx + len(CALL_OPEN) :]
            self._state = "call"
            return True
        if final:
            self._emit_text(out, self._buf)
            self._buf = ""
            return False
        cut = len(self._buf) - _partial_tag(self._buf, CALL_OPEN)
        cut = len(self._buf[:cut].rstrip())
        self._emit_text(out, self._buf[:cut])
        self._buf = self._buf[cut:]
        return False

    def _step_call(self, out: list[CompletionDelta], final: bool) -> bool:
        idx = self._buf.find(CALL_CLOSE)
        if idx >= 0:
            self._finish_call(out, self._buf[:idx], closed=True)
            self._buf = self._buf[idx + len(CALL_CLOSE) :]
            self._state = "text"
            return True
        if final:
            self._finish_call(out, self._buf, closed=False)
            self._buf = ""
            self._state = "text"
        return False

    def _finish_call(self, out: list[CompletionDelta], body: str, closed: bool) -> None:
        parsed = parse_call(body)
        if parsed is None:
            self._malformed += 1
            raw = self._ws_before_call + CALL_OPEN + body + (CALL_CLOSE if closed else "")
            self._emit_text(out, raw)
            return
        name, arguments = parsed
        index = len(self._calls)
        call = ToolCall(id=self._ids(), name=name, arguments=arguments)
        self._calls.append(call)
        out.append(ToolCallStart(index=index, id=call.id, name=name))
        out.append(ToolCallArgumentsDelta(index=index, arguments=arguments))
        self._strip_lead = True


def parse(
    tokenizer: Tokenizer, output_ids: list[int], id_factory: IdFactory | None = None
) -> ParsedOutput:
    """Parse a whole output (special tokens such as eos are dropped)."""
    parser = StreamParser(tokenizer, id_factory)
    parser.feed(output_ids)
    return parser.finish()
