"""Engine output ids → text, reasoning and tool calls, whole or as a stream of deltas.

One state machine serves both: :func:`parse` feeds every id at once, so a stream's
deltas concatenated always equal the final parse. Text is held back only while it could
still be the start of a marker (and whitespace that a following tool call would drop).
The markers are the model family's (:mod:`openforge.rendering.families`); by default
OpenForge's own Hermes-style ``<tool_call>`` and ``<think>`` tags.

Whitespace rules (what a round trip through :func:`encode_reply` preserves): reasoning is
stripped; text right after the reasoning's close tag or a call region loses its leading
whitespace, text right before a call region loses its trailing whitespace. A malformed
call region comes back verbatim as text and is counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from openforge.conversation import (
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    ToolSpec,
)
from openforge.rendering.parsed import IdFactory, OutputParser, ParsedOutput
from openforge.rendering.tokenizer import Detokenizer, Tokenizer

if TYPE_CHECKING:
    from openforge.rendering.families.family import ReasoningFormat, ToolFormat

__all__ = [
    "IdFactory",
    "OutputParser",
    "ParsedOutput",
    "ReplyParser",
    "StreamParser",
    "default_id_factory",
    "parse",
]

_State = Literal["start", "reasoning", "text", "call"]


def default_id_factory() -> IdFactory:
    """``call_0``, ``call_1``, ... (callers normally pass their dialect's own factory)."""
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def partial_tag(buf: str, tag: str) -> int:
    """Length of the longest suffix of ``buf`` that is a proper prefix of ``tag``."""
    for j in range(min(len(tag) - 1, len(buf)), 0, -1):
        if buf.endswith(tag[:j]):
            return j
    return 0


def _hermes() -> tuple[ToolFormat, ReasoningFormat]:
    from openforge.rendering.families.hermes import HERMES, THINK

    return HERMES, THINK


class ReplyParser:
    """What every incremental reply parser shares: sampled ids (stop ids dropped) are
    detokenized into a buffer that ``_drain`` turns into deltas once they are certain;
    ``flush`` at the end, then ``finish`` for the whole parse."""

    def __init__(
        self, detok: Detokenizer, drop_ids: frozenset[int], id_factory: IdFactory | None
    ) -> None:
        self._detok = detok
        self._drop = drop_ids
        self._ids = id_factory or default_id_factory()
        self._buf = ""
        self._text: list[str] = []
        self._reasoning: list[str] | None = None
        self._calls: list[ToolCall] = []
        self._malformed = 0
        self._flushed = False

    def feed(self, ids: list[int]) -> list[CompletionDelta]:
        """Consume newly sampled ids; return the deltas that are now certain."""
        if self._drop:
            ids = [i for i in ids if i not in self._drop]
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

    def _drain(self, out: list[CompletionDelta], final: bool) -> None:
        """Move what is certain from the buffer into ``out`` (all of it when ``final``)."""
        raise NotImplementedError


class StreamParser(ReplyParser):
    """Incremental parser: ``feed`` ids as they arrive, ``flush`` at the end, then ``finish``.

    ``tools``: the request's tools (formats that type argument values by schema read them).
    ``in_reasoning``: the prompt opened the reasoning block (its generation prompt ends
    with the open tag), so the output starts inside it.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        id_factory: IdFactory | None = None,
        *,
        tool_format: ToolFormat | None = None,
        reasoning: ReasoningFormat | None = None,
        tools: Sequence[ToolSpec] = (),
        in_reasoning: bool = False,
        drop_ids: frozenset[int] = frozenset(),
    ) -> None:
        if tool_format is None:
            tool_format, reasoning = _hermes()
        super().__init__(
            tokenizer.detokenizer(special=tool_format.keeps_special),
            drop_ids or (tokenizer.stop_ids if tool_format.keeps_special else frozenset()),
            id_factory,
        )
        self._fmt = tool_format
        self._think = reasoning
        self._tools = tools
        self._state: _State = "start"
        self._strip_lead = False
        self._ws_before_call = ""
        self._open = ""  # the marker that opened the current call region
        if in_reasoning and reasoning is not None:
            self._state, self._strip_lead, self._reasoning = "reasoning", True, []

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
        think = self._think
        if think is None:
            self._state = "text"
            return True
        head = self._buf.lstrip()
        if head.startswith(think.open):
            self._buf = head[len(think.open) :]
            self._state, self._strip_lead, self._reasoning = "reasoning", True, []
            return True
        if not final and think.open.startswith(head):
            return False
        self._state = "text"
        return True

    def _step_reasoning(self, out: list[CompletionDelta], final: bool) -> bool:
        assert self._think is not None
        close = self._think.close
        idx = self._buf.find(close)
        if idx >= 0:
            self._emit_reasoning(out, self._buf[:idx].rstrip())
            self._buf = self._buf[idx + len(close) :]
            self._state, self._strip_lead = "text", True
            return True
        if final:
            self._emit_reasoning(out, self._buf.rstrip())
            self._buf = ""
            return False
        cut = len(self._buf) - partial_tag(self._buf, close)
        cut = len(self._buf[:cut].rstrip())
        self._emit_reasoning(out, self._buf[:cut])
        self._buf = self._buf[cut:]
        return False

    def _find_open(self) -> tuple[int, str]:
        """The first call region's start in the buffer and its marker; (-1, "") if none."""
        found, marker = -1, ""
        for m in self._fmt.opens:
            idx = self._buf.find(m)
            if idx >= 0 and (found < 0 or idx < found):
                found, marker = idx, m
        return found, marker

    def _leading_json(self, final: bool) -> bool | None:
        """Whether the output opens with a JSON call (None: cannot tell yet)."""
        if not self._fmt.leading_json or self._text or self._calls or self._malformed:
            return False
        head = self._buf.lstrip()
        if not head:
            return None if not final else False
        return head.startswith("{")

    def _step_text(self, out: list[CompletionDelta], final: bool) -> bool:
        lead = self._leading_json(final)
        if lead is None:
            return False
        if lead:
            self._ws_before_call, self._open = "", ""
            self._buf = self._buf.lstrip()
            self._state = "call"
            return True
        idx, marker = self._find_open()
        if idx >= 0:
            before = self._buf[:idx]
            kept = before.rstrip()
            self._emit_text(out, kept)
            self._ws_before_call = before[len(kept) :]
            self._buf = self._buf[idx + len(marker) :]
            self._open = marker
            self._state = "call"
            return True
        if final:
            self._emit_text(out, self._buf)
            self._buf = ""
            return False
        held = max((partial_tag(self._buf, m) for m in self._fmt.opens), default=0)
        cut = len(self._buf) - held
        cut = len(self._buf[:cut].rstrip())
        self._emit_text(out, self._buf[:cut])
        self._buf = self._buf[cut:]
        return False

    def _step_call(self, out: list[CompletionDelta], final: bool) -> bool:
        close = self._fmt.close
        idx = self._buf.find(close) if close is not None else -1
        if idx >= 0 and close is not None:
            self._finish_call(out, self._buf[:idx], closed=True)
            self._buf = self._buf[idx + len(close) :]
            self._state = "text"
            return True
        if final:
            self._finish_call(out, self._buf, closed=False)
            self._buf = ""
            self._state = "text"
        return False

    def _finish_call(self, out: list[CompletionDelta], body: str, closed: bool) -> None:
        parsed = self._fmt.parse(body, self._tools)
        if not parsed:  # None (malformed) or a region with no call in it
            self._malformed += 1
            close = self._fmt.close if closed and self._fmt.close else ""
            self._emit_text(out, self._ws_before_call + self._open + body + close)
            return
        for name, arguments in parsed:
            index = len(self._calls)
            call = ToolCall(id=self._ids(), name=name, arguments=arguments)
            self._calls.append(call)
            out.append(ToolCallStart(index=index, id=call.id, name=name))
            out.append(ToolCallArgumentsDelta(index=index, arguments=arguments))
        self._strip_lead = True


def parse(
    tokenizer: Tokenizer, output_ids: list[int], id_factory: IdFactory | None = None
) -> ParsedOutput:
    """Parse a whole output under OpenForge's Hermes format (special tokens are dropped)."""
    parser = StreamParser(tokenizer, id_factory)
    parser.feed(output_ids)
    return parser.finish()
