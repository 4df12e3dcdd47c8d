"""Output parsing: encode_reply round trips, streaming equals the whole parse, tolerance."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.conversation import (
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from openforge.rendering import IdFactory, ParsedOutput, Renderer, RenderError

# Text a model might write: words, unicode (multi-byte), newlines, braces, stray '<'.
_ALPHABET = st.sampled_from(list("abc xyz\n{}:\"'<>/_-é日本🤖\t0123"))
_clean = st.text(_ALPHABET, max_size=40).map(str.strip)
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(_ALPHABET, max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(_ALPHABET, min_size=1, max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_args = st.dictionaries(st.text(_ALPHABET, min_size=1, max_size=8), _json_value, max_size=4)
_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
_calls = st.lists(st.tuples(_name, _args), max_size=3)


def _ids() -> IdFactory:
    n = iter(range(1000))
    return lambda: f"id_{next(n)}"


def _stream(
    renderer: Renderer, ids: list[int], rng: random.Random
) -> tuple[list[CompletionDelta], ParsedOutput]:
    parser = renderer.stream_parser(_ids())
    events: list[CompletionDelta] = []
    i = 0
    while i < len(ids):
        n = rng.randint(1, 4)
        events += parser.feed(ids[i : i + n])
        i += n
    events += parser.flush()
    return events, parser.finish()


def _concat(events: list[CompletionDelta]) -> ParsedOutput:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning_parts = [e.text for e in events if isinstance(e, ReasoningDelta)]
    calls: list[ToolCall] = []
    for e in events:
        if isinstance(e, ToolCallStart):
            calls.append(ToolCall(e.id, e.name, ""))
        elif isinstance(e, ToolCallArgumentsDelta):
            calls[e.index].arguments += e.arguments
    return ParsedOutput(text, "".join(reasoning_parts) if reasoning_parts else None, calls, 0)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_clean, reasoning=st.none() | _clean, calls=_calls, seed=st.integers(0, 2**16))
def test_encode_reply_round_trips_and_stream_matches(
    renderer: Renderer,
    text: str,
    reasoning: str | None,
    calls: list[tuple[str, dict[str, object]]],
    seed: int,
) -> None:
    if "<tool_call>" in text or "<think>" in text:
        return
    tool_calls = [
        ToolCall(f"c{i}", n, json.dumps(a, ensure_ascii=False)) for i, (n, a) in enumerate(calls)
    ]
    ids = renderer.encode_reply(text, reasoning, tool_calls)
    assert ids[-1] == renderer.tokenizer.eos_id
    parsed = renderer.parse(ids, _ids())
    assert parsed.malformed == 0
    assert parsed.text == text
    # An empty reasoning block is still a reasoning block.
    assert parsed.reasoning == reasoning
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == calls
    assert [c.arguments for c in parsed.tool_calls] == [c.arguments for c in tool_calls]
    events, streamed = _stream(renderer, ids, random.Random(seed))
    assert streamed == parsed
    joined = _concat(events)
    assert (joined.text, joined.reasoning) == (parsed.text, parsed.reasoning or None)
    assert [(c.id, c.name, c.arguments) for c in joined.tool_calls] == [
        (c.id, c.name, c.arguments) for c in parsed.tool_calls
    ]


def test_multibyte_characters_split_across_tokens_stream_whole(renderer: Renderer) -> None:
    text = "🤖 日本語 é ✓"
    ids = renderer.tokenizer.encode(text)
    # Byte-level BPE splits the emoji across several tokens; feed one id at a time.
    parser = renderer.stream_parser()
    pieces = [e.text for i in ids for e in parser.feed([i]) if isinstance(e, TextDelta)]
    pieces += [e.text for e in parser.flush() if isinstance(e, TextDelta)]
    assert "\ufffd" not in "".join(pieces)
    assert "".join(pieces) == text == parser.finish().text


def test_malformed_calls_come_back_as_text_and_are_counted(renderer: Renderer) -> None:
    raw = (
        'Doing it.\n<tool_call>{"name": "ok", "arguments": {"a": 1}}</tool_call>\n'
        "<tool_call>{not json}</tool_call>\n"
        '<tool_call>{"arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "second", "arguments": {"b": [1, 2]}}</tool_call>'
    )
    parsed = renderer.parse([*renderer.tokenizer.encode(raw), renderer.end_id])
    assert parsed.malformed == 2
    assert [c.name for c in parsed.tool_calls] == ["ok", "second"]
    assert parsed.tool_calls[1].arguments == '{"b": [1, 2]}'
    assert parsed.text == (
        'Doing it.<tool_call>{not json}</tool_call>\n<tool_call>{"arguments": {}}</tool_call>'
    )


def test_unclosed_call_at_length_is_malformed_text(renderer: Renderer) -> None:
    raw = 'Hi<tool_call>{"name": "f", "arguments": {"a": '
    parsed = renderer.parse(renderer.tokenizer.encode(raw))
    assert parsed.malformed == 1
    assert parsed.tool_calls == []
    assert parsed.text == raw


def test_complete_call_without_closing_tag_is_accepted(renderer: Renderer) -> None:
    parsed = renderer.parse(
        renderer.tokenizer.encode('<tool_call>\n{"name": "f", "arguments": {}}\n')
    )
    assert (parsed.malformed, [c.name for c in parsed.tool_calls]) == (0, ["f"])


def test_hermes_style_newlines_and_string_arguments(renderer: Renderer) -> None:
    raw = (
        "<think>\nplan\n</think>\n\nSure.\n"
        '<tool_call>\n{"name": "a", "arguments": "{\\"x\\": 1}"}\n</tool_call>\n'
    )
    parsed = renderer.parse(renderer.tokenizer.encode(raw), _ids())
    assert parsed.reasoning == "plan"
    assert parsed.text == "Sure."
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [("id_0", "a", '{"x": 1}')]


def test_text_mentioning_tags_is_kept(renderer: Renderer) -> None:
    raw = "Use <b>bold</b> and x < y; later <think> is just text"
    parsed = renderer.parse(renderer.tokenizer.encode(raw))
    assert (parsed.text, parsed.reasoning, parsed.malformed) == (raw, None, 0)


def test_held_back_text_is_only_a_possible_tag_prefix(renderer: Renderer) -> None:
    parser = renderer.stream_parser()
    out = parser.feed(renderer.tokenizer.encode("Hello world <tool_"))
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "Hello world"
    out = parser.feed(renderer.tokenizer.encode("x>"))
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == " <tool_x>"


def test_encode_reply_rejects_non_object_arguments(renderer: Renderer) -> None:
    with pytest.raises(RenderError, match="arguments must be a JSON object"):
        renderer.encode_reply("", None, [ToolCall("1", "f", "[1, 2]")])
