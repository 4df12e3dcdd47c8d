"""The declared shape of a model family: its tool format, reasoning format and template facts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openforge.conversation import ToolCall, ToolSpec
from openforge.rendering.parsed import IdFactory, OutputParser
from openforge.rendering.tokenizer import Tokenizer

__all__ = [
    "Calls",
    "ModelFacts",
    "ModelFamily",
    "Piece",
    "ReasoningFormat",
    "ToolFormat",
]

# A piece of a reply as the model writes it: its text, and whether it is a marker (a tag
# that is one token of the family's vocabulary, written as that token when the vocabulary
# has it) or content (encoded as text: a user's typed marker stays text).
Piece = tuple[str, bool]
# The calls a region holds, as (name, arguments JSON object text); None: malformed.
Calls = list[tuple[str, str]] | None


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What a model directory says about itself, for choosing its family."""

    chat_template: str
    model_type: str  # config.json's model_type ("" when absent)
    architectures: tuple[str, ...]
    vocab: frozenset[str]  # the added tokens' texts

    def has(self, *markers: str) -> bool:
        """Whether the template or the added tokens mention every one of ``markers``."""
        return all(m in self.chat_template or m in self.vocab for m in markers)


@dataclass(frozen=True, slots=True)
class ReasoningFormat:
    """Reasoning written between two tags before the answer (``<think>…</think>``)."""

    name: str
    open: str
    close: str
    # How a reply's reasoning is written: before, between the reasoning and the close
    # tag, and after it (Qwen3: "<think>\n…\n</think>\n\n").
    head: str = "\n"
    tail: str = "\n"
    after: str = "\n\n"
    vllm: str = ""  # vLLM's --reasoning-parser name

    def render(self, reasoning: str) -> list[Piece]:
        """The reasoning block of a reply."""
        return [
            (self.open, True),
            (f"{self.head}{reasoning}{self.tail}", False),
            (self.close, True),
            (self.after, False),
        ]


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How a family writes tool calls in its output, and how they are read back.

    A call *region* opens with one of ``opens`` and ends with ``close`` (or at the end of
    the output when ``close`` is None); ``parse`` turns a region's body into calls, or
    None when it is malformed (the region then stays visible as text and is counted).
    """

    name: str
    opens: tuple[str, ...]
    close: str | None
    parse: Callable[[str, Sequence[ToolSpec]], Calls]
    # The reply's text and calls as the model writes them (reasoning excluded).
    render: Callable[[str, Sequence[ToolCall]], list[Piece]]
    # The markers are special tokens, which a plain decode drops: keep their text.
    keeps_special: bool = True
    # A '{' that starts the output opens a region (Llama 3's JSON calls).
    leading_json: bool = False
    vllm: str = ""  # vLLM's --tool-call-parser name
    # A family whose output is not text-with-regions (gpt-oss Harmony channels) brings its
    # own parser and reply renderer; then ``opens``, ``parse`` and ``render`` are unused.
    parser: (
        Callable[[Tokenizer, Sequence[ToolSpec], IdFactory | None, frozenset[int]], OutputParser]
        | None
    ) = None
    render_reply: Callable[[str, str | None, Sequence[ToolCall]], list[Piece]] | None = None


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """One model family: its formats, how it is recognised and what its template does."""

    name: str
    title: str  # for docs and logs: the models it covers
    tools: ToolFormat
    reasoning: ReasoningFormat | None
    detect: Callable[[ModelFacts], bool]
    # Why the family's template re-renders earlier turns (so a later call's prompt does not
    # extend the earlier prompt + sampled reply: the rollout forks there), or None when
    # earlier turns are kept as they were sampled (prefix merge).
    rerenders: str | None = None
    # Tokens that end a reply besides the tokenizer's eos (they are engine stop ids).
    stop_tokens: tuple[str, ...] = ()
    # The token that ends a reply that calls tools, when it is not eos (Harmony's <|call|>).
    call_end: str | None = None

    def reply_pieces(
        self, text: str, reasoning: str | None, calls: Sequence[ToolCall]
    ) -> list[Piece]:
        """A reply's text exactly as the family's model writes it (before its end token)."""
        if self.tools.render_reply is not None:
            return self.tools.render_reply(text, reasoning, calls)
        out: list[Piece] = []
        if reasoning is not None and self.reasoning is not None:
            out += self.reasoning.render(reasoning)
        return out + self.tools.render(text, calls)

    def describe(self) -> dict[str, Any]:
        """Name, formats and vLLM parser names (for logs and ``openforge models``)."""
        return {
            "family": self.name,
            "tool_format": self.tools.name,
            "reasoning_format": self.reasoning.name if self.reasoning else None,
            "vllm_tool_parser": self.tools.vllm,
            "vllm_reasoning_parser": self.reasoning.vllm if self.reasoning else None,
        }
