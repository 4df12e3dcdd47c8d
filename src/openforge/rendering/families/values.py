"""Argument values written as bare text (XML-style formats), typed by the tool's schema.

Qwen3-Coder and GLM write each argument's value as text between tags, with no JSON
quoting: ``<parameter=path>a.txt</parameter>``, ``<arg_value>3</arg_value>``. Whether
``3`` is the string "3" or the number 3 is decided by the tool's JSON schema, as the
families' reference parsers do: a string-typed (or unknown) parameter keeps the text; a
number, boolean, null, object or array is read as that type, and text that does not
read as its declared type stays text.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

from openforge.conversation import ToolSpec

__all__ = ["param_types", "typed_value"]

_STRINGS = {"string", "str", "text", "varchar", "char", "enum"}


def param_types(tools: Sequence[ToolSpec], name: str) -> dict[str, Any] | None:
    """The ``properties`` of tool ``name``'s schema, or None when no such tool is known."""
    for t in tools:
        if t.name == name:
            props = t.parameters.get("properties") if isinstance(t.parameters, dict) else None
            return props if isinstance(props, dict) else {}
    return None


def _declared(schema: Any) -> tuple[str, bool]:
    """The parameter's first non-null type and whether null is allowed."""
    if not isinstance(schema, dict):
        return "string", False
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind.strip().lower(), kind.strip().lower() == "null"
    if isinstance(kind, list):
        kinds = [str(k).lower() for k in kind]
        rest = [k for k in kinds if k != "null"]
        return (rest[0] if rest else "null"), "null" in kinds
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            kinds = [str(o.get("type")).lower() for o in options if isinstance(o, dict)]
            rest = [k for k in kinds if k != "null"]
            return (rest[0] if rest else "string"), "null" in kinds
    return "string", False


def _number(text: str, integer: bool) -> Any:
    try:
        if integer:
            return int(text)
        value = float(text)
    except ValueError:
        return text
    if value != value or value in (float("inf"), float("-inf")):
        return text  # not a JSON number
    return int(value) if value.is_integer() else value


def typed_value(text: str, schema: Any) -> Any:
    """``text`` read as the type ``schema`` declares (text that does not fit stays text)."""
    kind, nullable = _declared(schema)
    if nullable and text.lower() in ("null", "none"):
        return None
    if kind in _STRINGS:
        return text
    if text.lower() in ("null", "none"):
        return None
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        return _number(text, integer=True)
    if kind.startswith(("num", "float", "double")):
        return _number(text, integer=False)
    if kind in ("boolean", "bool", "binary"):
        return text.lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
