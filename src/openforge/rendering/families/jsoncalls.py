"""Tool calls with JSON arguments between special-token markers: Kimi K2, DeepSeek V3.1+,
Llama 3 JSON and Mistral.

Kimi K2::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>

DeepSeek V3.1 / V3.2 (chat template)::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>

Llama 3.1 / 3.2 / 3.3 JSON (the whole reply, or after ``<|python_tag|>``; several calls
separated by ``;``)::

    {"name": "NAME", "parameters": {…}}

Mistral (v11+ tokenizers; the older ``[TOOL_CALLS] [{"name": …, "arguments": {…}}]``
array is read too)::

    [TOOL_CALLS]NAME[ARGS]{…}[TOOL_CALLS]NAME[ARGS]{…}

Arguments must be a JSON object; they are kept as the model wrote them (Kimi, DeepSeek,
Mistral) or re-serialised from the parsed object (Llama 3, whose calls are one object).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openforge.conversation import ToolCall, ToolSpec
from openforge.rendering.families.family import Calls, Piece, ToolFormat

__all__ = ["DEEPSEEK_V31", "KIMI_K2", "LLAMA3_JSON", "MISTRAL"]

_DECODER = json.JSONDecoder()


def _object_text(raw: str) -> str | None:
    """``raw`` stripped, when it is one JSON object; else None."""
    text = raw.strip()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return text if isinstance(value, dict) else None


def _args(arguments: str) -> str:
    return arguments.strip() or "{}"


# ---- Kimi K2 ------------------------------------------------------------------------------

_K_BEGIN, _K_END = "<|tool_call_begin|>", "<|tool_call_end|>"
_K_ARGS = "<|tool_call_argument_begin|>"
_K_SECTION, _K_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def _marked_calls(body: str, begin: str, sep: str, end: str) -> list[tuple[str, str]] | None:
    """``begin HEAD sep ARGS end`` repeated (whitespace between); (HEAD, ARGS) pairs."""
    out: list[tuple[str, str]] = []
    rest = body.strip()
    while rest:
        if not rest.startswith(begin):
            return None
        at_sep = rest.find(sep)
        at_end = rest.find(end)
        if at_sep < 0 or at_end < at_sep:
            return None
        out.append((rest[len(begin) : at_sep], rest[at_sep + len(sep) : at_end]))
        rest = rest[at_end + len(end) :].strip()
    return out


def _kimi_name(head: str) -> str:
    # "functions.NAME:INDEX" (the call's id in Kimi's own format)
    head = head.strip()
    head = head.removeprefix("functions.")
    return head.rsplit(":", 1)[0] if ":" in head else head


def _kimi_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    found = _marked_calls(body, _K_BEGIN, _K_ARGS, _K_END)
    if not found:
        return None
    calls = [(_kimi_name(head), _object_text(args)) for head, args in found]
    if any(not name or args is None for name, args in calls):
        return None
    return [(name, args) for name, args in calls if args is not None]


def _kimi_render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    out: list[Piece] = [(text, False)]
    if calls:
        out.append((_K_SECTION, True))
        for i, c in enumerate(calls):
            out += [(_K_BEGIN, True), (f"functions.{c.name}:{i}", False), (_K_ARGS, True)]
            out += [(_args(c.arguments), False), (_K_END, True)]
        out.append((_K_SECTION_END, True))
    return out


KIMI_K2 = ToolFormat(
    name="kimi_k2",
    opens=(_K_SECTION,),
    close=_K_SECTION_END,
    parse=_kimi_parse,
    render=_kimi_render,
    vllm="kimi_k2",
)

# ---- DeepSeek V3.1 ------------------------------------------------------------------------

_D_CALLS, _D_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_D_BEGIN, _D_SEP, _D_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


def _deepseek_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    found = _marked_calls(body, _D_BEGIN, _D_SEP, _D_END)
    if not found:
        return None
    calls = [(name.strip(), _object_text(args)) for name, args in found]
    if any(not name or args is None for name, args in calls):
        return None
    return [(name, args) for name, args in calls if args is not None]


def _deepseek_render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    out: list[Piece] = [(text, False)]
    if calls:
        out.append((_D_CALLS, True))
        for c in calls:
            out += [(_D_BEGIN, True), (c.name, False), (_D_SEP, True)]
            out += [(_args(c.arguments), False), (_D_END, True)]
        out.append((_D_CALLS_END, True))
    return out


DEEPSEEK_V31 = ToolFormat(
    name="deepseek_v31",
    opens=(_D_CALLS,),
    close=_D_CALLS_END,
    parse=_deepseek_parse,
    render=_deepseek_render,
    vllm="deepseek_v31",
)

# ---- Llama 3 JSON -------------------------------------------------------------------------

_PYTHON_TAG = "<|python_tag|>"


def _json_objects(body: str, sep: str) -> list[Any] | None:
    """Consecutive JSON values in ``body``, separated by ``sep`` and whitespace."""
    out: list[Any] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return out
        if out:
            if not body.startswith(sep, pos):
                return None
            pos += len(sep)
            while pos < len(body) and body[pos].isspace():
                pos += 1
        try:
            value, pos = _DECODER.raw_decode(body, pos)
        except ValueError:
            return None
        out.append(value)


def _named_call(obj: Any, key: str) -> tuple[str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get(key, obj.get("arguments", {}))
    if isinstance(args, str):
        text = _object_text(args)
        args = None if text is None else json.loads(text)
    if not isinstance(args, dict):
        return None
    return obj["name"], json.dumps(args, ensure_ascii=False)


def _llama_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    objects = _json_objects(body, ";")
    if not objects:
        return None
    calls = [_named_call(o, "parameters") for o in objects]
    return None if any(c is None for c in calls) else [c for c in calls if c is not None]


def _llama_render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    if not calls:
        return [(text, False)]
    body = "; ".join(
        f'{{"name": {json.dumps(c.name, ensure_ascii=False)}, "parameters": {_args(c.arguments)}}}'
        for c in calls
    )
    return [(text, False), (_PYTHON_TAG, True), (body, False)] if text else [(body, False)]


LLAMA3_JSON = ToolFormat(
    name="llama3_json",
    opens=(_PYTHON_TAG,),
    close=None,
    parse=_llama_parse,
    render=_llama_render,
    leading_json=True,
    vllm="llama3_json",
)

# ---- Mistral ------------------------------------------------------------------------------

_M_CALLS, _M_ARGS = "[TOOL_CALLS]", "[ARGS]"


def _mistral_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    if body.lstrip().startswith("["):  # the pre-v11 array of {"name", "arguments"}
        objects = _json_objects(body, ",")
        if objects is None or len(objects) != 1 or not isinstance(objects[0], list):
            return None
        named = [_named_call(o, "arguments") for o in objects[0]]
        return None if not named or None in named else [c for c in named if c is not None]
    calls: list[tuple[str, str]] = []
    for part in body.split(_M_CALLS):
        name, sep, args = part.partition(_M_ARGS)
        text = _object_text(args) if sep else None
        if not name.strip() or text is None:
            return None
        calls.append((name.strip(), text))
    return calls


def _mistral_render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    out: list[Piece] = [(text, False)]
    for c in calls:
        out += [(_M_CALLS, True), (c.name, False), (_M_ARGS, True), (_args(c.arguments), False)]
    return out


MISTRAL = ToolFormat(
    name="mistral",
    opens=(_M_CALLS,),
    close=None,
    parse=_mistral_parse,
    render=_mistral_render,
    vllm="mistral",
)
