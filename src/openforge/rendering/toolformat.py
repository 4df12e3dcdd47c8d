"""OpenForge's text format for tools, tool calls and reasoning (Hermes-style tags).

Chosen because models fine-tuned on Hermes / Qwen2.5 tool use already know it and a
model that knows none of it can read it: schemas are listed one JSON object per line in
the system turn, calls are ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
results come back inside ``<tool_response>`` tags, reasoning sits in ``<think>`` before
the answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from openforge.conversation import ContentPart, Message, TextPart, ToolCall, ToolChoice, ToolSpec

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "IMAGE_PLACEHOLDER",
    "THINK_CLOSE",
    "THINK_OPEN",
    "canonical_arguments",
    "content_text",
    "parse_call",
    "reply_body",
    "tool_call_text",
    "tool_results_text",
    "tools_section",
]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
# The model reads text only; a placeholder keeps the turn's shape and tells it why.
IMAGE_PLACEHOLDER = "[image omitted: this model reads text only]"

_TOOLS_INTRO = (
    "# Tools\n\n"
    "You may call one or more functions to help with the request. "
    "Each available function is described by one JSON object per line within <tools></tools>:\n"
)
_TOOLS_HOWTO = (
    "To call a function, write a JSON object with its name and arguments within "
    "<tool_call></tool_call> tags, one tag per call:\n"
    '<tool_call>{"name": <function-name>, "arguments": <arguments-object>}</tool_call>\n'
    "Results come back in the next user turn within <tool_response></tool_response> tags."
)
_HEAD_RE = re.compile(r'\{\s*"name"\s*:\s*"(?:[^"\\]|\\.)*"\s*,\s*"arguments"\s*:\s*')
_DECODER = json.JSONDecoder()


def content_text(parts: list[ContentPart], image_text: str = IMAGE_PLACEHOLDER) -> tuple[str, int]:
    """Join a message's parts with newlines (as vLLM does); each image becomes
    ``image_text`` (a text-only model's placeholder, or a VLM's image marker)."""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text, 0
    pieces: list[str] = []
    images = 0
    for p in parts:
        if isinstance(p, TextPart):
            pieces.append(p.text)
        else:
            pieces.append(image_text)
            images += 1
    return "\n".join(pieces), images


def tools_section(tools: Sequence[ToolSpec], choice: ToolChoice) -> str:
    """The system-turn block that declares the tools and how to call them."""
    lines = [
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.parameters},
            ensure_ascii=False,
        )
        for t in tools
    ]
    text = _TOOLS_INTRO + "<tools>\n" + "\n".join(lines) + "\n</tools>\n\n" + _TOOLS_HOWTO
    if choice.mode == "none":
        text += "\nDo not call any function in this reply."
    elif choice.mode == "required" and choice.name:
        text += f"\nYou must call the function {choice.name} in this reply."
    elif choice.mode == "required":
        text += "\nYou must call at least one function in this reply."
    return text


def tool_call_text(name: str, arguments: str) -> str:
    """One call as the model writes it; ``arguments`` is JSON object text, kept verbatim."""
    args = arguments.strip() or "{}"
    head = json.dumps(name, ensure_ascii=False)
    return f'{CALL_OPEN}{{"name": {head}, "arguments": {args}}}{CALL_CLOSE}'


def reply_body(text: str, reasoning: str | None, calls: list[ToolCall]) -> str:
    """An assistant reply's text exactly as the model should emit it (before eos)."""
    out = ""
    if reasoning is not None:
        out = f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n"
    out += text
    if calls:
        if text:
            out += "\n"
        out += "\n".join(tool_call_text(c.name, c.arguments) for c in calls)
    return out


def tool_results_text(
    messages: list[Message], image_text: str = IMAGE_PLACEHOLDER
) -> tuple[str, int]:
    """Consecutive tool results as one user turn's content."""
    pieces: list[str] = []
    images = 0
    for m in messages:
        body, n = content_text(m.content, image_text)
        images += n
        pieces.append(f"{RESPONSE_OPEN}\n{body}\n{RESPONSE_CLOSE}")
    return "\n".join(pieces), images


def canonical_arguments(arguments: str) -> str:
    """Arguments as sorted compact JSON, for matching calls whatever their spacing."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _arguments_of(obj: dict[str, Any], raw: str) -> str | None:
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            return args if isinstance(json.loads(args), dict) else None
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    head = _HEAD_RE.match(raw)
    if head is not None:
        try:
            _, end = _DECODER.raw_decode(raw, head.end())
        except ValueError:
            end = -1
        if end > 0 and raw[end:].strip() == "}":
            return raw[head.end() : end]
    return json.dumps(args, ensure_ascii=False)


def parse_call(content: str) -> tuple[str, str] | None:
    """``(name, arguments)`` from a ``<tool_call>`` body, or None when it is malformed."""
    raw = content.strip()
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = _arguments_of(obj, raw)
    return None if args is None else (name, args)
