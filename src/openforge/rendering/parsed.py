"""What a model's reply parses into, and the parser shape every family's parser has.

A leaf below both ``families/family.py`` (whose ``ToolFormat`` names the parser a family
makes) and ``parsing.py`` (which builds the parsers from a family's formats): each names
these types, neither imports the other for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from openforge.conversation import CompletionDelta, ToolCall

__all__ = ["IdFactory", "OutputParser", "ParsedOutput"]

IdFactory = Callable[[], str]


@dataclass(slots=True)
class ParsedOutput:
    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    # call regions that did not parse (a <tool_call> that is not a JSON object with a
    # name and object arguments, say): they are in ``text`` as the model wrote them
    malformed: int = 0


class OutputParser(Protocol):
    """What every family's parser offers: ids in, deltas out, then the whole parse."""

    def feed(self, ids: list[int]) -> list[CompletionDelta]: ...

    def flush(self) -> list[CompletionDelta]: ...

    def finish(self) -> ParsedOutput: ...
