"""A resent body parses only what is new: and always to what parsing it whole gives."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openforge.conversation import Conversation, tools_json
from openforge.dialects.anthropic.parse import parse_request as parse_anthropic
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_chat.parse import parse_request
from openforge.dialects.openai_responses.parse import parse_request as parse_responses
from openforge.dialects.prefix import BodyMemo, forget_known_members, value_end

Parse = Callable[..., Conversation]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": 'Run a command. Brackets ] } and quotes " in text.',
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _whole(body: bytes, parse: Parse = parse_request) -> Conversation | tuple[str, str | None]:
    forget_known_members()  # no tools known from earlier bodies: this one parsed whole
    try:
        return parse(body)
    except ApiError as err:
        return err.message, err.param


def _memo(
    body: bytes, memo: BodyMemo, parse: Parse = parse_request
) -> Conversation | tuple[str, str | None]:
    try:
        return parse(body, memo)
    except ApiError as err:
        return err.message, err.param


def _text(rng: random.Random) -> str:
    words = ["ls", "é", "🤖", "\\", '"', "]", "}", "[{", "\n", "messages", '"messages"', "\\u0041"]
    return "".join(rng.choice(words) for _ in range(rng.randint(0, 12)))


def _serialise(body: dict[str, object], style: int) -> bytes:
    if style == 0:
        return orjson.dumps(body)
    if style == 1:  # Python's json: spaces after separators, non-ASCII escaped
        return json.dumps(body).encode()
    return json.dumps(body, indent=1, ensure_ascii=False).encode()


def _message(rng: random.Random, i: int) -> list[dict[str, object]]:
    """One turn's messages: mostly valid (calls with their results), now and then not."""
    kind = rng.choice(["user", "assistant", "calls", "parts", "bad"])
    if kind == "assistant":
        return [{"role": "assistant", "content": _text(rng)}]
    if kind == "calls":
        call = {"id": f"c{i}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": json.dumps({"cmd": _text(rng)})}
        turn: list[dict[str, object]] = [
            {"role": "assistant", "content": None, "tool_calls": [call]}
        ]
        if rng.random() < 0.8:
            turn.append({"role": "tool", "tool_call_id": f"c{i}", "content": _text(rng)})
        return turn
    if kind == "parts":
        return [{"role": "user", "content": [{"type": "text", "text": _text(rng)}]}]
    if kind == "bad" and rng.random() < 0.3:  # an invalid message, named by its index
        return [
            rng.choice(
                [
                    {"role": "wizard", "content": "x"},
                    {"role": "assistant"},
                    {"role": "tool", "tool_call_id": f"x{i}", "content": "orphan"},
                ]
            )
        ]
    return [{"role": "user", "content": _text(rng)}]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_memo_parse_equals_whole_parse(seed: int) -> None:
    """A rollout's bodies, grown, edited, re-serialised, broken and retried at random:
    with the memo each parses to what it parses to alone (or fails with the same error)."""
    rng = random.Random(seed)
    memo = BodyMemo()
    messages: list[dict[str, object]] = [{"role": "system", "content": "You code."}]
    head_first = rng.random() < 0.5
    style = rng.choice([0, 1, 2])
    for _turn in range(12):
        action = rng.random()
        if action < 0.55:
            for _ in range(rng.randint(1, 3)):
                messages += _message(rng, len(messages))
        elif action < 0.65 and len(messages) > 1:
            messages[rng.randrange(len(messages))] = _message(rng, 0)[0]  # an edit
        elif action < 0.72:
            style = rng.choice([0, 1, 2])  # the harness re-serialises differently
        elif action < 0.78:
            del messages[rng.randint(1, len(messages)) :]  # compaction
            messages.append({"role": "user", "content": "summary"})
        body: dict[str, object] = {"model": rng.choice(["m", "m2"])}
        if head_first:
            body["messages"] = messages
            body["tools"] = TOOLS
        else:
            body["tools"] = TOOLS
            body["messages"] = messages
        if rng.random() < 0.1:
            body["n"] = 2
        raw = _serialise(body, style)
        if rng.random() < 0.08:
            raw = raw[: rng.randrange(len(raw))]  # cut short
        assert _memo(raw, memo) == _whole(raw)


def _anthropic_message(rng: random.Random, i: int) -> list[dict[str, object]]:
    """One turn's messages: mostly valid (tool uses answered in the next message)."""
    kind = rng.choice(["user", "blocks", "assistant", "results", "bad"])
    if kind in ("assistant", "results"):
        blocks: list[dict[str, object]] = [{"type": "text", "text": _text(rng)}]
        if rng.random() < 0.4:
            blocks.insert(0, {"type": "thinking", "thinking": _text(rng), "signature": "s"})
        if rng.random() < 0.2:  # left out of the prompt, counted
            blocks.append({"type": "redacted_thinking", "data": "opaque"})
        if kind == "assistant":
            if rng.random() < 0.5:
                blocks.append({"type": "tool_use", "id": f"t{i}", "name": "bash",
                               "input": {"cmd": _text(rng)}})  # fmt: skip
            return [{"role": "assistant", "content": blocks}]
        # Tool uses and their results, one flagged as an error.
        blocks += [{"type": "tool_use", "id": f"{x}{i}", "name": "bash",
                    "input": {"cmd": _text(rng)}} for x in "tu"]  # fmt: skip
        return [{"role": "assistant", "content": blocks}, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": _text(rng)},
            {"type": "tool_result", "tool_use_id": f"u{i}", "is_error": True,
             "content": [{"type": "text", "text": _text(rng)}]},
            {"type": "text", "text": _text(rng)},
        ]}]  # fmt: skip
    if kind == "blocks":
        return [{"role": "user", "content": [{"type": "text", "text": _text(rng)}]}]
    if kind == "bad" and rng.random() < 0.3:
        return [rng.choice([
            {"role": "user"},
            {"role": "assistant", "content": [{"type": "x"}]},
            {"role": "user", "content": [{"type": "document", "source": {"type": "text"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"o{i}"}]},
        ])]  # fmt: skip
    return [{"role": "user", "content": _text(rng)}]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_anthropic_memo_parse_equals_whole_parse(seed: int) -> None:
    """As Claude Code sends them: messages first, the cache marker moved to the last
    message every call, system and tools after; grown, edited and broken at random."""
    rng = random.Random(seed)
    memo = BodyMemo()
    messages: list[dict[str, object]] = [{"role": "user", "content": "start"}]
    style = rng.choice([0, 1])
    for _turn in range(12):
        action = rng.random()
        if action < 0.6:
            for _ in range(rng.randint(1, 3)):
                messages += _anthropic_message(rng, len(messages))
        elif action < 0.7:
            messages[rng.randrange(len(messages))] = _anthropic_message(rng, 0)[0]
        sent = [dict(m) for m in messages]
        last = sent[-1]
        if isinstance(last.get("content"), list) and last["content"]:
            content = [dict(b) for b in last["content"]]  # type: ignore[union-attr]
            content[-1]["cache_control"] = {"type": "ephemeral"}
            last["content"] = content
        body = {"model": "m", "messages": sent, "system": [{"type": "text", "text": "sys"}],
                "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
                "max_tokens": rng.choice([100, 0]), "stream": True}  # fmt: skip
        raw = _serialise(body, style)
        if rng.random() < 0.08:
            raw = raw[: rng.randrange(len(raw))]
        assert _memo(raw, memo, parse_anthropic) == _whole(raw, parse_anthropic)


def _responses_items(rng: random.Random, i: int) -> list[dict[str, object]]:
    """A turn's items as Codex sends them: reasoning, an answer or function calls, outputs."""
    kind = rng.choice(["user", "turn", "calls", "odd", "bad"])
    if kind == "user":
        return [{"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": _text(rng)}]}]  # fmt: skip
    if kind == "odd":  # left out of the prompt, counted: encrypted-only reasoning
        return [{"type": "reasoning", "summary": [], "encrypted_content": "e"}]
    if kind == "bad" and rng.random() < 0.3:
        return [rng.choice([
            {"type": "function_call", "call_id": f"c{i}"},  # no name, no arguments
            {"type": "web_search_call", "id": f"w{i}"},  # an item type not served
            {"type": "function_call_output", "call_id": f"o{i}", "output": "orphan"},
        ])]  # fmt: skip
    out: list[dict[str, object]] = []
    if rng.random() < 0.6:
        out.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": _text(rng)}]})
    if kind == "turn":
        out.append({"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": _text(rng)}]})  # fmt: skip
        return out
    for j in range(rng.randint(1, 2)):
        out.append({"type": "function_call", "call_id": f"c{i}_{j}", "name": "shell",
                    "arguments": json.dumps({"cmd": _text(rng)})})  # fmt: skip
    for j in range(len(out) - (out[0]["type"] == "reasoning")):
        out.append({"type": "function_call_output", "call_id": f"c{i}_{j}", "output": _text(rng)})
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_responses_memo_parse_equals_whole_parse(seed: int) -> None:
    """As Codex sends them: instructions, then input items that join the assistant
    message before them (reasoning, function calls); grown, edited, broken at random."""
    rng = random.Random(seed)
    memo = BodyMemo()
    items: list[dict[str, object]] = [{"type": "message", "role": "user", "content": "go"}]
    for _turn in range(12):
        action = rng.random()
        if action < 0.6:
            items += _responses_items(rng, len(items))
        elif action < 0.7:
            at = rng.randrange(len(items))
            items[at : at + 1] = _responses_items(rng, at)
        elif action < 0.75:
            del items[rng.randint(1, len(items)) :]  # cut mid-turn: an open assistant last
        body = {"model": "m", "instructions": "You are Codex.", "input": items,
                "tools": [{"type": "function", "name": "shell", "parameters": {}}],
                "store": False, "stream": True}  # fmt: skip
        raw = _serialise(body, rng.choice([0, 1]))
        if rng.random() < 0.08:
            raw = raw[: rng.randrange(len(raw))]
        assert _memo(raw, memo, parse_responses) == _whole(raw, parse_responses)


def _body(messages: list[dict[str, object]], **extra: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": messages, "tools": TOOLS, **extra})


def test_a_resent_body_keeps_the_messages_it_shares() -> None:
    memo = BodyMemo()
    msgs: list[dict[str, object]] = [{"role": "system", "content": "s"}]
    msgs.append({"role": "user", "content": "hi"})
    parse_request(_body(msgs), memo)  # a rollout's first body is not kept
    first = parse_request(_body(msgs), memo)
    assert first == parse_request(_body(msgs))
    msgs += [{"role": "assistant", "content": "yes"}, {"role": "user", "content": "more"}]
    second = parse_request(_body(msgs), memo)
    # The shared messages are last call's objects: they were not parsed again.
    assert second.messages[:2] == first.messages and second.messages[0] is first.messages[0]
    assert second == parse_request(_body(msgs))
    msgs[1] = {"role": "user", "content": "edited"}
    third = parse_request(_body(msgs), memo)
    assert third.messages[0] is first.messages[0] and third.messages[1] is not first.messages[1]
    assert third == parse_request(_body(msgs))
    # The same body again (a retry) shares all of it.
    assert parse_request(_body(msgs), memo).messages[3] is third.messages[3]


def test_a_second_messages_member_is_parsed_as_a_whole_parse_reads_it() -> None:
    memo = BodyMemo()
    msgs: list[dict[str, object]] = [{"role": "user", "content": "one"}]
    parse_request(_body(msgs), memo)
    parse_request(_body(msgs), memo)
    msgs.append({"role": "user", "content": "two"})
    # The last member of a name wins in a full parse: the second array, alone.
    dup = _body(msgs)[:-1] + b',"messages":[{"role":"user","content":"other"}]}'
    assert parse_request(dup, memo) == parse_request(dup)
    assert [m.text for m in parse_request(dup, memo).messages] == ["other"]


def test_errors_in_new_messages_name_their_index_in_the_body() -> None:
    memo = BodyMemo()
    msgs: list[dict[str, object]] = [{"role": "user", "content": "a"}] * 3
    parse_request(_body(msgs), memo)
    parse_request(_body(msgs), memo)
    with pytest.raises(ApiError) as err:
        parse_request(_body([*msgs, {"role": "assistant"}]), memo)
    assert err.value.param == "messages[3].content"


@pytest.mark.parametrize(
    ("text", "start"),
    [
        (b'{"a": [1, "]}", {"b": "\\"}"}]} tail', 0),
        (b'x ["a\\\\", ["{"]] tail', 2),
        (b'"\\u005d\\"]" tail', 0),
    ],
)
def test_value_end_skips_strings_and_nesting(text: bytes, start: int) -> None:
    end = value_end(text, start, len(text))
    assert end is not None
    assert text[end:] == b" tail"
    orjson.loads(text[start:end])
    # Scanned no further than a limit: found when it ends there, else None.
    assert value_end(text, start, end) == end
    assert [value_end(text, start, short) for short in range(start, end)] == [None] * (end - start)


def test_claude_code_calls_share_all_but_the_moved_cache_marker(
    harness_body: Callable[[str], bytes],
) -> None:
    """Claude Code's recorded first call, grown as it grows a session: each call moves
    its cache marker to the newest message, so all messages before the last marked one
    are kept from the last body."""
    body = json.loads(harness_body("claude-code-2.1.197.messages.first-call.json"))
    memo = BodyMemo()
    prev: Conversation | None = None
    shared = 0
    for turn in range(5):
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        conv = parse_anthropic(raw, memo)
        # Its 24 tools (64 KB) are found again by their bytes: the very tuple.
        assert parse_anthropic(raw).tools is conv.tools and len(conv.tools) == 24
        assert conv == _whole(raw, parse_anthropic)
        if prev is not None and turn >= 2:  # the system prompt is made anew each call
            shared = 0
            while conv.messages[1 + shared] is prev.messages[1 + shared]:
                shared += 1
            # All but the system prompt and the last wire message's two (its tool result
            # and its text), re-parsed as it lost the marker.
            assert shared == len(prev.messages) - 3
        prev = conv
        for m in body["messages"]:  # the marker moves: older messages lose it
            if isinstance(m["content"], list):
                m["content"] = [{k: v for k, v in b.items() if k != "cache_control"}
                                for b in m["content"]]  # fmt: skip
        body["messages"] += [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": f"Look {turn}.", "signature": "c2ln"},
                {"type": "tool_use", "id": f"toolu_{turn}", "name": "Bash",
                 "input": {"command": f"ls -la src/{turn}", "description": "List"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{turn}",
                 "content": "total 8\ndrwxr-xr-x  2 u u 4096 .\n" * (turn + 1)},
                {"type": "text", "text": "<system-reminder>x</system-reminder>",
                 "cache_control": {"type": "ephemeral"}},
            ]},
        ]  # fmt: skip
    assert shared == 9


def test_codex_calls_keep_every_closed_turn(harness_body: Callable[[str], bytes]) -> None:
    """Codex's recorded first call, grown as Codex grows it (reasoning, a call, its
    output): each call parses only the items after the last call's."""
    body = json.loads(harness_body("codex-0.171.0.responses.first-call.json"))
    memo = BodyMemo()
    prev: Conversation | None = None
    for turn in range(4):
        raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        conv = parse_responses(raw, memo)
        # Its tools are found again, namespaced ones (a "tools" member within) too.
        assert parse_responses(raw).tools is conv.tools and len(conv.tools) == 12
        assert conv == _whole(raw, parse_responses)
        if prev is not None and turn >= 2:  # all the last call sent (from the third call)
            assert all(a is b for a, b in zip(conv.messages, prev.messages, strict=False))
        prev = conv
        body["input"] += [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"Plan {turn}"}],
             "encrypted_content": "gAAAA"},
            {"type": "function_call", "call_id": f"call_{turn}", "name": "shell",
             "arguments": json.dumps({"command": ["ls", f"src/{turn}"]})},
            {"type": "function_call_output", "call_id": f"call_{turn}", "output": "a.py\nb.py"},
        ]  # fmt: skip


CHAT_TOOLS = [
    TOOLS,
    [*TOOLS, {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}],
    [{"type": "custom", "name": "apply_patch"}, *TOOLS],
    [{"type": "function", "function": {"description": "no name"}}],  # invalid: tools[0]
    [{"type": "function", "function": {"name": "x", "parameters": "not a schema"}}],  # invalid
    [],
]
ANTHROPIC_TOOLS = [
    [{"name": "bash", "input_schema": {"type": "object"}}],
    [
        {"name": "bash", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search"},
    ],
    [{"input_schema": {"type": "object"}}],  # invalid: no name
]
RESPONSES_TOOLS = [
    [{"type": "function", "name": "shell", "parameters": {}}],
    [
        {
            "type": "namespace",
            "name": "mcp__t",
            "tools": [
                {"type": "function", "name": "a", "parameters": {}},
                {"type": "function", "name": "b"},
            ],
        }
    ],
    [{"type": "function", "name": "a"}, {"type": "function", "name": "a"}],  # a duplicate
]


POOLS = {"chat": CHAT_TOOLS, "anthropic": ANTHROPIC_TOOLS, "responses": RESPONSES_TOOLS}
PARSERS: dict[str, Parse] = {
    "chat": parse_request,
    "anthropic": parse_anthropic,
    "responses": parse_responses,
}


def _known_tools_body(rng: random.Random, dialect: str, style: int = 0) -> bytes:
    """A body whose tools are drawn from a few lists (all seen before), at the top level
    or nested under another member, spelled by orjson or not; sometimes with a second
    ``tools`` member, its name escaped, or cut short."""
    tools = rng.choice(POOLS[dialect])
    body: dict[str, object] = {"model": "m"}
    where = rng.choice(["before", "after", "before", "after", "nested", "both"])
    if where == "before" or where == "both":
        body["tools"] = tools
    if dialect == "chat":
        body["messages"] = [{"role": "user", "content": _text(rng)}]
    elif dialect == "anthropic":
        body["messages"] = [{"role": "user", "content": _text(rng)}]
        body["max_tokens"] = 100
    else:
        body["input"] = [{"type": "message", "role": "user", "content": _text(rng)}]
    if where in ("nested", "both"):  # the same bytes, but not the request's tools
        body["metadata"] = {"tools": rng.choice(POOLS[dialect])}
    if where == "after":
        body["tools"] = tools
    raw = _serialise(body, style)
    if rng.random() < 0.1:  # a second member of the name: the last one wins
        other = orjson.dumps(rng.choice(POOLS[dialect]))
        raw = raw.rstrip()[:-1] + b',"t\\u006fols":' + other + b"}"
    if rng.random() < 0.05:
        raw = raw[: rng.randrange(len(raw))]
    return raw


def _teach() -> None:
    """Every pool's tools list seen once, at the top level, as orjson spells it."""
    user = [{"role": "user", "content": "x"}]
    bodies = {
        "chat": {"model": "m", "messages": user},
        "anthropic": {"model": "m", "max_tokens": 9, "messages": user},
        "responses": {"model": "m", "input": "x"},
    }
    for dialect, pool in POOLS.items():
        for tools in pool:
            _whole_warm(orjson.dumps({**bodies[dialect], "tools": tools}), PARSERS[dialect])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_known_tools_parse_equals_whole_parse(seed: int) -> None:
    """Tools an earlier body sent are not parsed again, and every body still parses to
    what it parses to with nothing known (or fails with the same error), whether its
    tools were seen, nested elsewhere, spelled otherwise, duplicated or broken."""
    rng = random.Random(seed)
    memos = {name: BodyMemo() for name in PARSERS}
    for _call in range(8):
        dialect = rng.choice(list(PARSERS))
        parse = PARSERS[dialect]
        raw = _known_tools_body(rng, dialect, rng.choice([0, 0, 0, 1, 2]))
        _teach()
        warm = _memo(raw, memos[dialect], parse) if rng.random() < 0.5 else _whole_warm(raw, parse)
        assert warm == _whole(raw, parse)


def _whole_warm(body: bytes, parse: Parse) -> Conversation | tuple[str, str | None]:
    try:
        return parse(body)
    except ApiError as err:
        return err.message, err.param


def test_tools_sent_again_are_the_same_tuple() -> None:
    """The second body with the same tools (spelled as orjson spells them) gets the
    first one's tools: the very tuple, whose JSON the renderer and the store keep."""
    forget_known_members()
    body = _body([{"role": "user", "content": "one"}])
    first = parse_request(body)
    second = parse_request(_body([{"role": "user", "content": "two"}]))
    assert isinstance(first.tools, tuple) and second.tools is first.tools
    assert tools_json(second.tools) is tools_json(first.tools)
    assert orjson.loads(tools_json(first.tools)) == orjson.loads(orjson.dumps(first.tools))
    # Spelled another way (Python's json: spaces), the bytes differ: parsed anew, equal.
    spaced = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}],
                         "tools": TOOLS}).encode()  # fmt: skip
    again = parse_request(spaced)
    assert again.tools == first.tools and again.tools is not first.tools
    # The same bytes nested elsewhere are not the request's tools.
    nested = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "metadata": {"tools": TOOLS}}
    )
    assert parse_request(nested).tools == ()
