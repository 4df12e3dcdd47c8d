"""Hypothesis strategies and helpers shared by the model-family tests: replies a model
might write (text, reasoning, calls with arguments full of quotes, unicode and nesting)
and tool schemas that type those arguments."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from openforge.conversation import ToolSpec

ALPHABET = st.sampled_from(list("abc xyz\n{}:\"'<>/_-é日本🤖\t0123"))
CLEAN = st.text(ALPHABET, max_size=30).map(str.strip)
SCALAR = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(ALPHABET, max_size=12)
VALUE = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(ALPHABET, min_size=1, max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)
KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
ARGS = st.dictionaries(KEY, VALUE, max_size=3)
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
CALLS = st.lists(st.tuples(NAME, ARGS), max_size=3)
# Text that opens with one of these may read as markup (a Llama 3 reply that starts with
# "{" is a call): generated prose does not.
MARKERS = ("<", "[", "{")
_JSON_TYPES = {str: "string", bool: "boolean", int: "integer", list: "array", dict: "object"}


def schema_tools(calls: list[tuple[str, dict[str, Any]]]) -> list[ToolSpec]:
    """Tools whose schemas type each argument (XML formats read types from them)."""
    tools: dict[str, dict[str, Any]] = {}
    for name, args in calls:
        props = tools.setdefault(name, {})
        for k, v in args.items():
            kind = "null" if v is None else _JSON_TYPES[type(v)]
            props[k] = {"type": kind}
    return [ToolSpec(n, "", {"type": "object", "properties": p}) for n, p in tools.items()]


def typed_consistently(calls: list[tuple[str, dict[str, Any]]]) -> bool:
    """Whether every (tool, argument) has one type across the calls (one schema fits)."""
    seen: dict[tuple[str, str], type] = {}
    for name, args in calls:
        for k, v in args.items():
            if seen.setdefault((name, k), type(v)) is not type(v):
                return False
    return True
