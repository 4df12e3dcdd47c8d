"""gpt-oss Harmony: replies as messages on channels, tool calls addressed to functions.

After the generation prompt ``<|start|>assistant`` the model writes messages::

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
    {…}<|call|>
    <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>

``analysis`` is reasoning; ``final`` is the answer; ``commentary`` addressed ``to=functions.
NAME`` (the recipient may also follow the role) is a call, and without a recipient it is a
preamble shown to the user (text). ``<|call|>`` and ``<|return|>`` end the reply (they are
stop tokens, so the engine's output ends there). A call whose body is not a JSON object,
or addressed to something other than a function, stays visible as text and is counted.
Bodies are kept verbatim (no whitespace stripping: Harmony writes none around them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from openforge.conversation import (
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    ToolSpec,
)
from openforge.rendering.families.family import Calls, Piece, ReasoningFormat, ToolFormat
from openforge.rendering.parsing import IdFactory, ReplyParser, partial_tag
from openforge.rendering.tokenizer import Tokenizer

__all__ = ["HARMONY", "HARMONY_REASONING", "HarmonyParser"]

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
_TERMINATORS = (END, START, CALL, RETURN)
_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([^\s<]+)")
_RECIPIENT_RE = re.compile(r"\bto=([^\s<]+)")
_Kind = Literal["reasoning", "text", "call"]


@dataclass(slots=True)
class _Message:
    header: str
    kind: _Kind
    name: str = ""  # the function a call is addressed to
    body: list[str] = field(default_factory=list)


def _classify(header: str) -> _Message:
    channel = _CHANNEL_RE.search(header)
    recipient = _RECIPIENT_RE.search(header)
    name = channel.group(1) if channel else "final"
    if recipient is not None:
        return _Message(header, "call", recipient.group(1))
    return _Message(header, "reasoning" if name == "analysis" else "text")


class HarmonyParser(ReplyParser):
    """The Harmony reply parser (see the module docstring); same interface as
    :class:`openforge.rendering.parsing.StreamParser`."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        tools: Sequence[ToolSpec] = (),
        id_factory: IdFactory | None = None,
        drop_ids: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(
            tokenizer.detokenizer(special=True), drop_ids or tokenizer.stop_ids, id_factory
        )
        self._msg: _Message | None = None

    def _drain(self, out: list[CompletionDelta], final: bool) -> None:
        while self._step(out, final):
            pass

    def _step(self, out: list[CompletionDelta], final: bool) -> bool:
        if self._msg is None:
            return self._header(out, final)
        return self._body(out, final)

    def _header(self, out: list[CompletionDelta], final: bool) -> bool:
        at = self._buf.find(MESSAGE)
        if at < 0:
            if final and self._buf.strip():  # a header never finished: shown as written
                self._malformed += 1
                self._emit(out, "text", self._buf)
                self._buf = ""
            return False
        self._msg = _classify(self._buf[:at])
        self._buf = self._buf[at + len(MESSAGE) :]
        if self._msg.kind == "reasoning":
            if self._reasoning is None:
                self._reasoning = []
            elif self._reasoning:  # consecutive analysis messages read as paragraphs
                self._emit(out, "reasoning", "\n\n")
        return True

    def _body(self, out: list[CompletionDelta], final: bool) -> bool:
        msg = self._msg
        assert msg is not None
        ends = [(i, t) for t in _TERMINATORS if (i := self._buf.find(t)) >= 0]
        if ends or final:
            at, term = min(ends) if ends else (len(self._buf), "")
            self._piece(out, msg, self._buf[:at])
            self._buf = self._buf[at + (0 if term == START else len(term)) :]
            self._close(out, msg)
            self._msg = None
            return True
        hold = max(partial_tag(self._buf, t) for t in _TERMINATORS)
        self._piece(out, msg, self._buf[: len(self._buf) - hold])
        self._buf = self._buf[len(self._buf) - hold :]
        return False

    def _piece(self, out: list[CompletionDelta], msg: _Message, piece: str) -> None:
        if msg.kind == "call":
            msg.body.append(piece)
        else:
            self._emit(out, msg.kind, piece)

    def _emit(self, out: list[CompletionDelta], kind: _Kind, piece: str) -> None:
        if not piece:
            return
        if kind == "reasoning":
            assert self._reasoning is not None
            self._reasoning.append(piece)
            out.append(ReasoningDelta(piece))
        else:
            self._text.append(piece)
            out.append(TextDelta(piece))

    def _close(self, out: list[CompletionDelta], msg: _Message) -> None:
        if msg.kind != "call":
            return
        body = "".join(msg.body)
        name = msg.name.removeprefix("functions.") if msg.name.startswith("functions.") else ""
        args = _object_text(body)
        if not name or args is None:
            self._malformed += 1
            self._emit(out, "text", msg.header + MESSAGE + body)
            return
        index = len(self._calls)
        call = ToolCall(id=self._ids(), name=name, arguments=args)
        self._calls.append(call)
        out.append(ToolCallStart(index=index, id=call.id, name=name))
        out.append(ToolCallArgumentsDelta(index=index, arguments=args))


def _object_text(raw: str) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return raw.strip() if isinstance(value, dict) else None


def _render_reply(text: str, reasoning: str | None, calls: Sequence[ToolCall]) -> list[Piece]:
    out: list[Piece] = []

    def message(header: str, body: str) -> None:
        if out:
            out.append((START, True))
            out.append(("assistant", False))
        out.extend([(CHANNEL, True), (header, False), (MESSAGE, True), (body, False)])

    if reasoning is not None:
        message("analysis", reasoning)
        out.append((END, True))
    if calls:
        if text:
            message("commentary", text)
            out.append((END, True))
        for i, c in enumerate(calls):
            if out:
                out += [(START, True), ("assistant", False)]
            out += [(CHANNEL, True), (f"commentary to=functions.{c.name} ", False)]
            out += [(CONSTRAIN, True), ("json", False), (MESSAGE, True)]
            out.append((c.arguments.strip() or "{}", False))
            if i < len(calls) - 1:
                out.append((CALL, True))
    else:
        message("final", text)
    return out


def _unused_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    return None


def _parser(
    tokenizer: Tokenizer,
    tools: Sequence[ToolSpec],
    id_factory: IdFactory | None,
    drop_ids: frozenset[int],
) -> HarmonyParser:
    return HarmonyParser(tokenizer, tools, id_factory, drop_ids)


HARMONY = ToolFormat(
    name="harmony",
    opens=(),
    close=None,
    parse=_unused_parse,
    render=lambda text, calls: [(text, False)],
    vllm="openai",
    parser=_parser,
    render_reply=_render_reply,
)
# Reasoning is Harmony's analysis channel, read by HarmonyParser itself.
HARMONY_REASONING = ReasoningFormat(
    name="harmony", open=CHANNEL + "analysis", close=END, vllm="openai_gptoss"
)
