"""Tool calls written as tags with bare-text values: Qwen3-Coder and GLM-4.5 / 4.7.

Qwen3-Coder (and the later Qwen models that use it)::

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

GLM-4.5 (GLM-4.7 writes the same without the newlines)::

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    </tool_call>

Values are typed by the request's tool schema (:mod:`.values`). A region that is not
exactly this shape (a missing close tag, text between parameters, no name) is malformed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openforge.conversation import ToolCall, ToolSpec
from openforge.rendering.families.family import Calls, Piece, ToolFormat
from openforge.rendering.families.values import param_types, typed_value

__all__ = ["GLM45", "GLM47", "QWEN3_CODER", "value_text"]

_FUNC, _FUNC_END = "<function=", "</function>"
_PARAM, _PARAM_END = "<parameter=", "</parameter>"
_KEY, _KEY_END, _VAL, _VAL_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"


def value_text(value: Any, scalars_as_python: bool = False) -> str:
    """An argument's value as these templates write it: strings bare, objects and arrays
    as JSON, other scalars as JSON (GLM's ``tojson``) or as Python writes them (Qwen3-Coder's
    ``| string``: ``True``, ``None``; its parser reads both)."""
    if isinstance(value, str):
        return value
    if scalars_as_python and not isinstance(value, dict | list):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def _dump(name: str, raw: dict[str, str], tools: Sequence[ToolSpec]) -> tuple[str, str]:
    props = param_types(tools, name) or {}
    args = {k: typed_value(v, props[k]) if k in props else v for k, v in raw.items()}
    return name, json.dumps(args, ensure_ascii=False)


def _strip_newline(value: str) -> str:
    # The template writes one newline after the open tag and one before the close tag.
    if value.startswith("\n"):
        value = value[1:]
    return value[:-1] if value.endswith("\n") else value


def _qwen_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    calls: list[tuple[str, str]] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return calls
        if not body.startswith(_FUNC, pos):
            return None
        head_end = body.find(">", pos)
        if head_end < 0:
            return None
        name = body[pos + len(_FUNC) : head_end].strip()
        if not name:
            return None
        pos = head_end + 1
        raw: dict[str, str] = {}
        while True:
            while pos < len(body) and body[pos].isspace():
                pos += 1
            if body.startswith(_FUNC_END, pos):
                pos += len(_FUNC_END)
                break
            if not body.startswith(_PARAM, pos):
                return None
            key_end = body.find(">", pos)
            end = body.find(_PARAM_END, key_end)
            if key_end < 0 or end < 0:
                return None
            raw[body[pos + len(_PARAM) : key_end].strip()] = _strip_newline(body[key_end + 1 : end])
            pos = end + len(_PARAM_END)
        calls.append(_dump(name, raw, tools))


def _qwen_render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
    # As Qwen3-Coder's template writes an assistant turn after "<|im_start|>assistant\n".
    out: list[Piece] = [(text, False)]
    if text and calls:
        out.append(("\n\n", False))
    for i, c in enumerate(calls):
        if i:
            out.append(("\n", False))
        out += [("<tool_call>", True), (f"\n{_FUNC}{c.name}>\n", False)]
        for key, value in _arguments(c.arguments).items():
            written = value_text(value, scalars_as_python=True)
            out.append((f"{_PARAM}{key}>\n{written}\n{_PARAM_END}\n", False))
        out += [(f"{_FUNC_END}\n", False), ("</tool_call>", True)]
    return out


def _glm_parse(body: str, tools: Sequence[ToolSpec]) -> Calls:
    cut = body.find(_KEY)
    name = (body if cut < 0 else body[:cut]).strip()
    if not name or "<" in name:
        return None
    raw: dict[str, str] = {}
    pos = len(body) if cut < 0 else cut
    while True:
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):
            return [_dump(name, raw, tools)]
        if not body.startswith(_KEY, pos):
            return None
        key_end = body.find(_KEY_END, pos)
        if key_end < 0:
            return None
        key = body[pos + len(_KEY) : key_end].strip()
        pos = key_end + len(_KEY_END)
        while pos < len(body) and body[pos].isspace():
            pos += 1
        end = body.find(_VAL_END, pos)
        if not body.startswith(_VAL, pos) or end < 0:
            return None
        raw[key] = body[pos + len(_VAL) : end]
        pos = end + len(_VAL_END)


def _glm_render(newlines: bool) -> Any:
    sep = "\n" if newlines else ""

    def render(text: str, calls: Sequence[ToolCall]) -> list[Piece]:
        out: list[Piece] = [(text, False)]
        for c in calls:
            out += [("\n" if text or newlines else "", False), ("<tool_call>", True)]
            out.append((f"{c.name}{sep}", False))
            for key, value in _arguments(c.arguments).items():
                out += [("<arg_key>", True), (key, False), ("</arg_key>", True), (sep, False)]
                out += [("<arg_value>", True), (value_text(value), False)]
                out += [("</arg_value>", True), (sep, False)]
            out.append(("</tool_call>", True))
        return out

    return render


QWEN3_CODER = ToolFormat(
    name="qwen3_coder",
    opens=("<tool_call>",),
    close="</tool_call>",
    parse=_qwen_parse,
    render=_qwen_render,
    vllm="qwen3_coder",
)
GLM45 = ToolFormat(
    name="glm45",
    opens=("<tool_call>",),
    close="</tool_call>",
    parse=_glm_parse,
    render=_glm_render(newlines=True),
    vllm="glm45",
)
GLM47 = ToolFormat(
    name="glm47",
    opens=("<tool_call>",),
    close="</tool_call>",
    parse=_glm_parse,
    render=_glm_render(newlines=False),
    vllm="glm47",
)
