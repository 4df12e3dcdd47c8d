"""Anthropic Messages: the Claude Code fixture, rendering, and the real anthropic SDK."""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import orjson
import pytest

from openforge.conversation import (
    Completion,
    ImagePart,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    Usage,
)
from openforge.dialects.anthropic import (
    AnthropicStreamEncoder,
    parse_count_tokens_request,
    parse_request,
    render_count_tokens,
    render_error,
    render_response,
    tool_input,
)
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError

# A real 1x1 PNG: images are decoded and checked as requests are parsed.
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGM4wcUFAAJ6AN1nJ0J9AAAAAElFTkSuQmCC"
)

Make = Callable[[tuple[int, bytes, str]], anthropic.Anthropic]
CLAUDE_CODE = "claude-code-2.1.197.messages.first-call.json"


def body(**fields: object) -> bytes:
    base: dict[str, object] = {
        "model": "claude-x",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    base.update(fields)
    return orjson.dumps(base)


def test_claude_code_first_call_parses(harness_body: Callable[[str], bytes]) -> None:
    raw = harness_body(CLAUDE_CODE)
    conv = parse_request(raw)
    wire = orjson.loads(raw)
    assert conv.model == "claude-opus-4-8" and conv.stream
    assert conv.params.max_tokens == 64000
    # system blocks -> one leading system message; then the user turn and the
    # mid-history system turn Claude Code sends.
    assert [m.role for m in conv.messages] == ["system", "user", "system"]
    assert len(conv.messages[0].content) == 3
    assert conv.messages[0].text.startswith("x-anthropic-billing-header")
    assert conv.messages[1].content[-1].text == "say hi"  # type: ignore[union-attr]
    assert conv.messages[2].text.startswith("Available agent types")
    assert len(conv.tools) == len(wire["tools"]) == 24
    assert conv.tools[1].name == "Bash" and conv.tools[1].parameters["type"] == "object"
    assert conv.ignored_tools == []
    assert conv.reasoning and conv.metadata["thinking"] == {"type": "adaptive"}
    assert "user_id" in conv.metadata["metadata"]
    counted = parse_count_tokens_request(
        orjson.dumps({k: v for k, v in wire.items() if k != "max_tokens"})
    )
    assert len(counted.messages) == 3 and len(counted.tools) == 24


def test_history_blocks_map_to_canonical() -> None:
    conv = parse_request(
        body(
            system="be brief",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see", "cache_control": {"type": "ephemeral"}},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": PNG_1PX,
                            },
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.jpg"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                        {"type": "redacted_thinking", "data": "opaque"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"c": 1}},
                        {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_2",
                            "is_error": True,
                            "content": [{"type": "text", "text": "boom"}],
                        },
                        {"type": "text", "text": "go on"},
                    ],
                },
            ],
            tools=[
                {"name": "Bash", "input_schema": {"type": "object"}},
                {"type": "custom", "name": "Read", "input_schema": {"type": "object"}},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            ],
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stop_sequences=["###"],
            temperature=0.2,
            top_p=0.9,
            top_k=40,
            thinking={"type": "enabled", "budget_tokens": 2048},
            context_management={"edits": []},
        )
    )
    roles = [m.role for m in conv.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]
    img = conv.messages[1].content[1]
    assert isinstance(img, ImagePart) and img.url == f"data:image/png;base64,{PNG_1PX}"
    assert img.width == img.height == 1 and img.sha256 is not None
    assert isinstance(conv.messages[1].content[2], ImagePart)
    asst = conv.messages[2]
    assert asst.reasoning == "hmm" and asst.text == "ok"
    assert asst.tool_calls[0] == ToolCall("toolu_1", "Bash", '{"c":1}')
    assert conv.messages[3].tool_call_id == "toolu_1" and conv.messages[3].text == "out"
    assert conv.messages[4].text == "boom" and conv.messages[5].text == "go on"
    assert conv.metadata["ignored_blocks"] == 1 and conv.metadata["tool_errors"] == 1
    assert [t.name for t in conv.tools] == ["Bash", "Read"]
    assert conv.ignored_tools == ["web_search"]
    assert conv.tool_choice.mode == "required" and not conv.parallel_tool_calls
    p = conv.params
    assert (p.stop, p.temperature, p.top_p, p.top_k) == (["###"], 0.2, 0.9, 40)
    assert conv.reasoning


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (orjson.dumps({"model": "m", "messages": []}), "max_tokens"),
        (body(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
        (body(tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (body(temperature=3), "temperature"),
        (b"\xff", None),
    ],
)
def test_bad_requests_get_anthropic_400(raw: bytes, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_request(raw)
    assert info.value.param == param
    status, payload = render_error(info.value)
    assert status == 400
    wire = orjson.loads(payload)
    assert wire["type"] == "error" and wire["error"]["type"] == "invalid_request_error"


def ctx(**kw: object) -> ResponseContext:
    base: dict[str, object] = {"response_id": "msg_01", "model": "claude-x", "prompt_tokens": 10}
    base.update(kw)
    return ResponseContext(**base)  # type: ignore[arg-type]


COMPLETION = Completion(
    text="Running it.",
    reasoning="I should list files.",
    tool_calls=[ToolCall("toolu_01", "Bash", '{"command": "ls"}')],
    finish_reason="tool_calls",
    usage=Usage(10, 7),
)


def test_sdk_reads_json_message(anthropic_client: Make) -> None:
    client = anthropic_client((200, render_response(COMPLETION, ctx()), "application/json"))
    msg = client.messages.create(model="claude-x", max_tokens=10, messages=[])
    assert msg.id == "msg_01" and msg.stop_reason == "tool_use"
    kinds = [b.type for b in msg.content]
    assert kinds == ["thinking", "text", "tool_use"]
    tool = msg.content[2]
    assert tool.type == "tool_use" and tool.input == {"command": "ls"} and tool.id == "toolu_01"
    assert msg.usage.input_tokens == 10 and msg.usage.output_tokens == 7


def stream_events(enc: AnthropicStreamEncoder, completion: Completion) -> bytes:
    return b"".join(
        [
            enc.start(),
            enc.delta(ReasoningDelta("I should ")),
            enc.delta(ReasoningDelta("list files.")),
            enc.delta(TextDelta("Running ")),
            enc.delta(TextDelta("it.")),
            enc.delta(ToolCallStart(0, "toolu_01", "Bash")),
            enc.delta(ToolCallArgumentsDelta(0, '{"command": ')),
            enc.delta(ToolCallArgumentsDelta(0, '"ls"}')),
            enc.finish(completion),
        ]
    )


def event_names(raw: bytes) -> list[str]:
    return [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]


def test_stream_order_is_the_documented_one() -> None:
    names = event_names(stream_events(AnthropicStreamEncoder(ctx()), COMPLETION))
    block = ["content_block_start", "content_block_delta", "content_block_delta"]
    assert names == [
        "message_start",
        "ping",
        *block,
        "content_block_delta",  # signature_delta closes the thinking block
        "content_block_stop",
        *block,
        "content_block_stop",
        "content_block_start",
        "content_block_delta",  # the buffered, validated input_json_delta
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_sdk_stream_accumulates_final_message(anthropic_client: Make) -> None:
    raw = stream_events(AnthropicStreamEncoder(ctx()), COMPLETION)
    client = anthropic_client((200, raw, "text/event-stream"))
    with client.messages.stream(model="claude-x", max_tokens=10, messages=[]) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(texts) == "Running it."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "I should list files."  # type: ignore[union-attr]
    tool = final.content[2]
    assert tool.type == "tool_use" and tool.input == {"command": "ls"}
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 7
    assert final.usage.input_tokens == 10


def test_invalid_tool_json_becomes_empty_object(anthropic_client: Make) -> None:
    assert tool_input('{"a": 1') == ({}, False)
    assert tool_input("[1]") == ({}, False)
    assert tool_input("") == ({}, True)
    enc = AnthropicStreamEncoder(ctx())
    raw = b"".join(
        [
            enc.start(),
            enc.delta(ToolCallStart(0, "toolu_9", "Bash")),
            enc.delta(ToolCallArgumentsDelta(0, '{"command": "l')),
            enc.finish(Completion(finish_reason="tool_calls", usage=Usage(1, 1))),
        ]
    )
    assert enc.invalid_tool_arguments == 1
    client = anthropic_client((200, raw, "text/event-stream"))
    with client.messages.stream(model="claude-x", max_tokens=10, messages=[]) as stream:
        final = stream.get_final_message()
    assert final.content[0].input == {}  # type: ignore[union-attr]
    bad = Completion(
        tool_calls=[ToolCall("toolu_8", "Bash", "not json")], finish_reason="tool_calls"
    )
    assert orjson.loads(render_response(bad, ctx()))["content"][0]["input"] == {}


def test_in_band_error_raises_overloaded(anthropic_client: Make) -> None:
    enc = AnthropicStreamEncoder(ctx())
    raw = enc.start() + enc.delta(TextDelta("par")) + enc.error(ApiError("overloaded", "busy"))
    client = anthropic_client((200, raw, "text/event-stream"))
    with (
        pytest.raises(anthropic.APIStatusError, match="busy"),
        client.messages.stream(model="claude-x", max_tokens=10, messages=[]) as stream,
    ):
        stream.get_final_message()


@pytest.mark.parametrize(
    ("err", "status", "exc"),
    [
        (ApiError.context_length(9000, 8192), 400, anthropic.BadRequestError),
        (ApiError("authentication", "bad key"), 401, anthropic.AuthenticationError),
        (ApiError("permission", "no"), 403, anthropic.PermissionDeniedError),
        (ApiError("not_found", "none"), 404, anthropic.NotFoundError),
        (ApiError("overloaded", "busy"), 529, anthropic.APIStatusError),
        (ApiError("internal", "bug"), 500, anthropic.InternalServerError),
    ],
)
def test_error_envelopes(
    anthropic_client: Make, err: ApiError, status: int, exc: type[Exception]
) -> None:
    got, payload = render_error(err)
    assert got == status
    client = anthropic_client((status, payload, "application/json"))
    with pytest.raises(exc) as info:
        client.messages.create(model="claude-x", max_tokens=10, messages=[])
    if err.kind == "context_length":
        assert "prompt is too long: 9000 tokens > 8192 maximum" in str(info.value)


def test_count_tokens_sdk(anthropic_client: Make) -> None:
    client = anthropic_client((200, render_count_tokens(321), "application/json"))
    out = client.messages.count_tokens(model="claude-x", messages=[])
    assert out.input_tokens == 321


def test_roundtrip_rendered_message_parses_back() -> None:
    out = orjson.loads(render_response(COMPLETION, ctx()))
    conv = parse_request(body(messages=[{"role": "user", "content": "hi"}, out]))
    back = conv.messages[1]
    assert back.text == COMPLETION.text and back.reasoning == COMPLETION.reasoning
    assert back.tool_calls[0].id == "toolu_01"
    assert orjson.loads(back.tool_calls[0].arguments) == {"command": "ls"}


def test_unknown_fields_are_logged_not_rejected(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="openforge.dialects.ignored"):
        parse_request(body(output_config={"effort": "high"}, context_management={"edits": []}))
    assert "context_management" in caplog.text and "output_config" in caplog.text


def test_matched_stop_string_is_reported_from_the_completion(anthropic_client: Make) -> None:
    done = Completion(text="x = 1", finish_reason="stop", usage=Usage(3, 4), stop_sequence="\n\n")
    client = anthropic_client((200, render_response(done, ctx()), "application/json"))
    msg = client.messages.create(model="claude-x", max_tokens=10, messages=[])
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "\n\n")
    enc = AnthropicStreamEncoder(ctx())
    tail = orjson.loads(enc.finish(done).split(b"data: ")[1].split(b"\n")[0])
    assert tail["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "\n\n"}
