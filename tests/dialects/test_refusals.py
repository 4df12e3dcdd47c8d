"""What the vendors' own APIs refuse, each dialect refuses too, naming the field; and every
recorded harness body is still accepted (the refusals never touch what a harness sends)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from openforge.dialects.anthropic import parse_request as parse_anthropic
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_chat import parse_request as parse_chat
from openforge.dialects.openai_responses import parse_request as parse_responses
from openforge.dialects.prefix import BodyMemo

# As conftest.py finds them: beside the checkout (../shared), and the repo's own copies.
FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "harness-requests"
REPO_FIXTURES = Path(__file__).parent / "fixtures"

Parse = Callable[..., Any]


def _refused(parse: Parse, body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as err:
        parse(orjson.dumps(body))
    assert err.value.kind == "invalid_request"
    return err.value


# ---- Chat Completions -------------------------------------------------------------------

CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
LS = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}


def _chat(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, **extra}


def test_chat_refusals_name_the_field() -> None:
    asked = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    user = {"role": "user", "content": "hi"}
    orphan = _refused(
        parse_chat, _chat([user, {"role": "tool", "tool_call_id": "call_9", "content": "x"}])
    )
    assert orphan.param == "messages[1].tool_call_id" and "call_9" in orphan.message
    twice = _refused(parse_chat, _chat([user, asked, asked]))
    assert twice.param == "messages[2].tool_calls" and "call_1" in twice.message
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "x"}
    again = _refused(parse_chat, _chat([user, asked, answer, answer]))
    assert again.param == "messages[3].tool_call_id"
    assert _refused(parse_chat, _chat([])).param == "messages"
    choice = {"type": "function", "function": {"name": "rm"}}
    named = _refused(parse_chat, _chat([user], tools=[LS], tool_choice=choice))
    assert named.param == "tool_choice.function.name" and "'rm'" in named.message
    effort = _refused(parse_chat, _chat([user], reasoning_effort="maximal"))
    assert effort.param == "reasoning_effort"
    # The same, answered in order, is served.
    conv = parse_chat(
        orjson.dumps(
            _chat(
                [user, asked, answer],
                tools=[LS],
                tool_choice={"type": "function", "function": {"name": "ls"}},
                reasoning_effort="xhigh",
            )
        )
    )
    assert [m.role for m in conv.messages] == ["user", "assistant", "tool"]


# ---- Responses ------------------------------------------------------------------------

FC = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
OUT = {"type": "function_call_output", "call_id": "c1", "output": "a b"}
HI = {"type": "message", "role": "user", "content": "hi"}
FN = {"type": "function", "name": "ls", "parameters": {"type": "object"}}


def _resp(items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": items, **extra}


def test_responses_refusals_name_the_field() -> None:
    orphan = _refused(parse_responses, _resp([HI, OUT]))
    assert orphan.param == "input[1].call_id" and "c1" in orphan.message
    # A call is named by the item that opened its assistant turn.
    twice = _refused(parse_responses, _resp([HI, FC, FC, OUT]))
    assert twice.param == "input[1].call_id" and "c1" in twice.message
    assert _refused(parse_responses, _resp([HI, FC, OUT, OUT])).param == "input[3].call_id"
    assert _refused(parse_responses, _resp([])).param == "input"
    assert _refused(parse_responses, _resp("")).param == "input"
    unknown = _refused(parse_responses, _resp([HI, {"type": "telepathy", "x": 1}]))
    assert unknown.param == "input[1].type" and "not an input item type" in unknown.message
    hosted = _refused(parse_responses, _resp([HI, {"type": "web_search_call", "id": "ws"}]))
    assert hosted.param == "input[1].type" and "not supported" in hosted.message
    choice = {"type": "function", "name": "rm"}
    named = _refused(parse_responses, _resp([HI], tools=[FN], tool_choice=choice))
    assert named.param == "tool_choice.name"
    effort = _refused(parse_responses, _resp([HI], reasoning={"effort": "ultra"}))
    assert effort.param == "reasoning.effort"
    # With previous_response_id an output may answer a stored call: left to the state.
    conv = parse_responses(orjson.dumps(_resp([OUT], previous_response_id="resp_1")))
    assert conv.messages[-1].tool_call_id == "c1"
    named_ls = {"type": "function", "name": "ls"}
    body = _resp([HI, FC, OUT], tools=[FN], tool_choice=named_ls, reasoning={"effort": "minimal"})
    ok = parse_responses(orjson.dumps(body))
    assert [m.role for m in ok.messages] == ["user", "assistant", "tool"]


async def test_responses_outputs_pair_with_the_stored_conversation() -> None:
    from openforge.conversation import Conversation, Message, ToolCall
    from openforge.dialects.openai_responses import StoredResponses

    stored = Conversation(messages=[Message("assistant", tool_calls=[ToolCall("c1", "ls", "")])])

    async def lookup(rollout: str, response: str) -> Conversation | None:
        return stored if response == "resp_1" else None

    memory = StoredResponses(lookup)
    follow = parse_responses(orjson.dumps(_resp([OUT], previous_response_id="resp_1")))
    resolved = await memory.resolve(follow, "r")
    assert [m.role for m in resolved.messages] == ["assistant", "tool"]
    stray = {"type": "function_call_output", "call_id": "c2", "output": "?"}
    with pytest.raises(ApiError) as err:
        await memory.resolve(
            parse_responses(orjson.dumps(_resp([stray], previous_response_id="resp_1"))), "r"
        )
    assert err.value.kind == "invalid_request" and "c2" in err.value.message


# ---- Anthropic Messages ---------------------------------------------------------------

USE = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"}
BASH = {"name": "Bash", "input_schema": {"type": "object"}}


def _msgs(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 2048, "messages": messages, **extra}


def test_anthropic_refusals_name_the_field() -> None:
    user = {"role": "user", "content": "hi"}
    asked = {"role": "assistant", "content": [USE]}
    answered = {"role": "user", "content": [RESULT]}
    orphan = _refused(parse_anthropic, _msgs([user, answered]))
    assert orphan.param == "messages[1].content" and "toolu_1" in orphan.message
    # Only the previous assistant turn's tool uses may be answered.
    later = [user, asked, answered, {"role": "assistant", "content": "ok"}, answered]
    assert _refused(parse_anthropic, _msgs(later)).param == "messages[4].content"
    twice = _refused(parse_anthropic, _msgs([user, asked, answered, asked]))
    assert "must be unique" in twice.message and twice.param == "messages[3].content"
    both = {"role": "user", "content": [RESULT, RESULT]}
    assert _refused(parse_anthropic, _msgs([user, asked, both])).param == "messages[2].content"
    assert _refused(parse_anthropic, _msgs([])).param == "messages"
    odd = {"role": "user", "content": [{"type": "hologram", "data": "x"}]}
    unknown = _refused(parse_anthropic, _msgs([odd]))
    assert unknown.param == "messages[0].content[0].type" and "not a content block" in (
        unknown.message
    )
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    unsupported = _refused(parse_anthropic, _msgs([{"role": "user", "content": [doc]}]))
    assert "'document' blocks are not supported" in unsupported.message
    misplaced = _refused(parse_anthropic, _msgs([user, {"role": "assistant", "content": [RESULT]}]))
    assert misplaced.param == "messages[1].content[0].type"
    named = _refused(
        parse_anthropic, _msgs([user], tools=[BASH], tool_choice={"type": "tool", "name": "Rm"})
    )
    assert named.param == "tool_choice.name" and "'Rm'" in named.message
    for thinking in ({"type": "enabled", "budget_tokens": -5}, {"type": "enabled"}):
        bad = _refused(parse_anthropic, _msgs([user], thinking=thinking))
        assert bad.param == "thinking.budget_tokens"
    assert (
        "1024"
        in _refused(
            parse_anthropic, _msgs([user], thinking={"type": "enabled", "budget_tokens": 1000})
        ).message
    )
    ok = parse_anthropic(
        orjson.dumps(
            _msgs(
                [
                    user,
                    asked,
                    {"role": "user", "content": [RESULT, {"type": "text", "text": "go"}]},
                ],
                tools=[BASH],
                tool_choice={"type": "tool", "name": "Bash"},
                thinking={"type": "enabled", "budget_tokens": 1024},
            )
        )
    )
    assert [m.role for m in ok.messages] == ["user", "assistant", "tool", "user"]


def test_a_system_turn_in_messages_is_kept_as_claude_code_sends_it() -> None:
    """Claude Code 2.1.197 sends ``role: system`` turns mid-history (see its fixture): the
    public reference lists only user and assistant, but a pinned harness is never
    refused; such a turn may hold text only."""
    system = {"role": "system", "content": "Available agent types: ..."}
    conv = parse_anthropic(orjson.dumps(_msgs([{"role": "user", "content": "hi"}, system])))
    assert [m.role for m in conv.messages] == ["user", "system"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    bad = _refused(parse_anthropic, _msgs([{"role": "system", "content": [image]}]))
    assert bad.param == "messages[0].content[0].type"


# ---- images --------------------------------------------------------------------------


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    head = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\0" * (width + 1) * 4)  # a few rows: the header is what counts
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("parse", "body", "param"),
    [
        (
            parse_anthropic,
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": ["x"]}]}],
            },
            "messages[0].content[0].type",
        ),
        (
            parse_chat,
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": {}}],
            },
            "tools[0].type",
        ),
        (parse_responses, {"model": "m", "input": [{"type": ["message"]}]}, "input[0].type"),
    ],
)
def test_a_type_that_is_not_a_string_is_refused_by_name(
    parse: Parse, body: dict[str, Any], param: str
) -> None:
    # A list or object as a union member's ``type`` once reached a set lookup (TypeError).
    err = _refused(parse, body)
    assert err.param == param, err


def test_a_decompression_bomb_is_named_as_one() -> None:
    """A 20000x20000 PNG (a few hundred bytes) is refused before a pixel is decoded, as
    a decompression bomb, in every dialect."""
    data = base64.b64encode(_png(20000, 20000)).decode()
    url = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    chat = _refused(parse_chat, _chat([{"role": "user", "content": [url]}]))
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    anth = _refused(parse_anthropic, _msgs([{"role": "user", "content": [block]}]))
    for err in (chat, anth):
        assert "decompression bomb" in err.message and "20000x20000" in err.message
    assert chat.param == "messages[0].content[0].image_url.url"
    assert anth.param == "messages[0].content[0].source.data"


# ---- what harnesses send --------------------------------------------------------------


def _recorded() -> list[tuple[str, bytes]]:
    """Every recorded harness body: the shared fixtures and the repo's copies."""
    found: dict[str, bytes] = {}
    for root in (REPO_FIXTURES, FIXTURES):
        if root.is_dir():
            for path in sorted(root.glob("*.json")):
                found[f"{root.name}/{path.name}"] = path.read_bytes()
    return sorted(found.items())


PARSERS: dict[str, Parse] = {
    ".messages.": parse_anthropic,
    ".responses.": parse_responses,
    ".chat.": parse_chat,
}


@pytest.mark.parametrize(("name", "body"), _recorded(), ids=[n for n, _ in _recorded()])
def test_every_recorded_harness_body_is_accepted(name: str, body: bytes) -> None:
    """Whole, and through a rollout's memo as its next calls resend it."""
    parse = next(p for key, p in PARSERS.items() if key in name)
    conv = parse(body)
    assert conv.messages
    memo = BodyMemo()
    for _ in range(3):
        assert parse(body, memo).messages == conv.messages
    assert json.loads(body)  # the fixture itself is JSON
