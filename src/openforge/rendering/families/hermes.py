"""Hermes / Qwen2.5 / Qwen3: ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``.

OpenForge's own tool template (:mod:`openforge.rendering.toolformat`) writes this format,
so it is also the family of every model whose template knows no tools (SmolLM2). The tags
are plain text (or non-special added tokens), so the output is decoded as before: special
tokens dropped. Reasoning is Qwen3's ``<think>\\n…\\n</think>\\n\\n``.
"""

from __future__ import annotations

from collections.abc import Sequence

from openforge.conversation import ToolCall, ToolSpec
from openforge.rendering.families.family import Calls, Piece, ReasoningFormat, ToolFormat
from openforge.rendering.toolformat import CALL_CLOSE, CALL_OPEN, parse_call, tool_call_text

__all__ = ["HERMES", "THINK"]


def _parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    found = parse_call(body)
    return None if found is None else [found]


def _render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    out = text
    if calls:
        if text:
            out += "\n"
        out += "\n".join(tool_call_text(c.name, c.arguments) for c in calls)
    return [(out, False)]


HERMES = ToolFormat(
    name="hermes",
    opens=(CALL_OPEN,),
    close=CALL_CLOSE,
    parse=_parse,
    render=_render,
    keeps_special=False,
    vllm="hermes",
)

THINK = ReasoningFormat(name="qwen3", open="<think>", close="</think>", vllm="qwen3")
