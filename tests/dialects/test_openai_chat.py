"""Chat Completions: parsing, rendering, and the real openai SDK reading our bytes."""

from __future__ import annotations

import math
from collections.abc import Callable

import openai
import orjson
import pytest

from openforge.conversation import (
    Completion,
    ImagePart,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    Usage,
)
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_chat import (
    ChatStreamEncoder,
    parse_request,
    render_error,
    render_response,
)

Make = Callable[[tuple[int, bytes, str]], openai.OpenAI]
PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGM4wcUFAAJ6AN1nJ0J9AAAAAElFTkSuQmCC"
)


def body(**fields: object) -> bytes:
    base: dict[str, object] = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]}
    base.update(fields)
    return orjson.dumps(base)


def test_parse_full_conversation() -> None:
    conv = parse_request(
        body(
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": '{"p": "."}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
            ],
            tools=[
                {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
                {"type": "custom", "custom": {"name": "apply_patch"}},
            ],
            tool_choice={"type": "function", "function": {"name": "ls"}},
            parallel_tool_calls=False,
            max_completion_tokens=64,
            temperature=0.5,
            top_p=0.9,
            stop="END",
            seed=7,
            logprobs=True,
            top_logprobs=3,
            stream=True,
            stream_options={"include_usage": True},
            some_future_field={"x": 1},
        )
    )
    roles = [m.role for m in conv.messages]
    assert roles == ["system", "developer", "user", "assistant", "tool"]
    image = conv.messages[2].content[1]
    assert isinstance(image, ImagePart) and image.media_type == "image/png" and image.url == PNG
    assert conv.messages[3].tool_calls == [ToolCall("call_1", "ls", '{"p": "."}')]
    assert conv.messages[4].tool_call_id == "call_1" and conv.messages[4].text == "a.txt"
    assert [t.name for t in conv.tools] == ["ls"] and conv.ignored_tools == ["apply_patch"]
    assert conv.tool_choice.mode == "required" and conv.tool_choice.name == "ls"
    assert not conv.parallel_tool_calls
    p = conv.params
    assert (p.max_tokens, p.temperature, p.top_p, p.stop, p.seed) == (64, 0.5, 0.9, ["END"], 7)
    assert p.logprobs and p.top_logprobs == 3
    assert conv.stream and conv.metadata["include_usage"] is True


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (orjson.dumps({"messages": []}), "model"),
        (body(n=2), "n"),
        (body(messages=[{"role": "wizard", "content": "x"}]), "messages[0]"),
        (body(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]), None),
        (body(temperature="hot"), "temperature"),
        (body(messages=[{"role": "assistant"}]), "messages[0].content"),
    ],
)
def test_bad_requests_name_the_field(raw: bytes, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_request(raw)
    assert info.value.kind == "invalid_request"
    if param is not None:
        assert info.value.param == param
        assert param in info.value.message
    status, payload = render_error(info.value)
    assert status == 400
    assert set(orjson.loads(payload)["error"]) == {"message", "type", "param", "code"}


def test_unsupported_content_type_names_path() -> None:
    with pytest.raises(ApiError) as info:
        parse_request(body(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]))
    assert info.value.param == "messages[0].content[0]"


def ctx(**kw: object) -> ResponseContext:
    base: dict[str, object] = {"response_id": "chatcmpl-1", "model": "smollm2", "created": 1}
    base.update(kw)
    return ResponseContext(**base)  # type: ignore[arg-type]


COMPLETION = Completion(
    text="Let me look.",
    tool_calls=[ToolCall("call_9", "ls", '{"path": "/tmp"}')],
    finish_reason="tool_calls",
    output_ids=[5, 6],
    output_logprobs=[-0.5, -0.25],
    usage=Usage(10, 2),
)


def test_sdk_reads_json_response(openai_client: Make) -> None:
    c = ctx(logprobs=True, token_text=lambda i: f"t{i}")
    client = openai_client((200, render_response(COMPLETION, c), "application/json"))
    out = client.chat.completions.create(model="smollm2", messages=[])
    choice = out.choices[0]
    assert out.id == "chatcmpl-1" and out.model == "smollm2"
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look."
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.id == "call_9" and call.function.name == "ls"  # type: ignore[union-attr]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert [(t.token, t.logprob, t.top_logprobs) for t in choice.logprobs.content] == [
        ("t5", -0.5, []),
        ("t6", -0.25, []),
    ]
    assert out.usage is not None and out.usage.total_tokens == 12


def stream_bytes(c: ResponseContext) -> bytes:
    enc = ChatStreamEncoder(c)
    parts = [
        enc.start(),
        enc.delta(TextDelta("Let me ")),
        enc.delta(TextDelta("look.")),
        enc.delta(ToolCallStart(0, "call_9", "ls")),
        enc.delta(ToolCallArgumentsDelta(0, '{"path": ')),
        enc.delta(ToolCallArgumentsDelta(0, '"/tmp"}')),
        enc.finish(COMPLETION),
    ]
    return b"".join(parts)


def test_sdk_streams_chunks_with_tool_calls_and_usage(openai_client: Make) -> None:
    raw = stream_bytes(ctx(include_usage=True, logprobs=True))
    assert raw.endswith(b"data: [DONE]\n\n")
    client = openai_client((200, raw, "text/event-stream"))
    chunks = list(client.chat.completions.create(model="smollm2", messages=[], stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me look."
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert calls[0].id == "call_9" and calls[0].function and calls[0].function.name == "ls"
    assert all(tc.id is None for tc in calls[1:])
    assert "".join(tc.function.arguments or "" for tc in calls if tc.function) == (
        '{"path": "/tmp"}'
    )
    finishing = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finishing] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 10
    assert all(c.usage is None for c in chunks[:-1])


def test_sdk_stream_helper_accumulates_tool_call(openai_client: Make) -> None:
    client = openai_client((200, stream_bytes(ctx()), "text/event-stream"))
    with client.chat.completions.stream(model="smollm2", messages=[]) as stream:
        final = stream.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == "Let me look."
    assert msg.tool_calls is not None
    assert msg.tool_calls[0].function.arguments == '{"path": "/tmp"}'


def test_in_band_stream_error_raises_in_sdk(openai_client: Make) -> None:
    enc = ChatStreamEncoder(ctx())
    raw = enc.start() + enc.delta(TextDelta("par")) + enc.error(ApiError("overloaded", "down"))
    client = openai_client((200, raw, "text/event-stream"))
    with pytest.raises(openai.APIError, match="down"):
        list(client.chat.completions.create(model="smollm2", messages=[], stream=True))


@pytest.mark.parametrize(
    ("err", "status", "code", "exc"),
    [
        (
            ApiError.context_length(9000, 8192),
            400,
            "context_length_exceeded",
            openai.BadRequestError,
        ),
        (
            ApiError("overloaded", "engine draining"),
            503,
            "server_is_overloaded",
            openai.APIStatusError,
        ),
        (ApiError("authentication", "bad key"), 401, "invalid_api_key", openai.AuthenticationError),
        (ApiError("not_found", "no such model"), 404, "not_found", openai.NotFoundError),
        (ApiError("internal", "boom"), 500, "server_error", openai.InternalServerError),
    ],
)
def test_error_envelopes_map_to_sdk_exceptions(
    openai_client: Make, err: ApiError, status: int, code: str, exc: type[Exception]
) -> None:
    got_status, payload = render_error(err)
    assert got_status == status
    client = openai_client((status, payload, "application/json"))
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="smollm2", messages=[])
    assert getattr(info.value, "code", None) == code
    if err.kind == "context_length":
        assert "8192" in str(info.value) and "9000" in str(info.value)


def test_logprobs_are_finite_and_bytes_match() -> None:
    out = orjson.loads(render_response(COMPLETION, ctx(logprobs=True, token_text=lambda i: "é")))
    entry = out["choices"][0]["logprobs"]["content"][0]
    assert entry["bytes"] == list("é".encode()) and math.isfinite(entry["logprob"])
    assert orjson.loads(render_response(COMPLETION, ctx()))["choices"][0]["logprobs"] is None


def test_roundtrip_response_message_parses_back() -> None:
    out = orjson.loads(render_response(COMPLETION, ctx()))
    msg = out["choices"][0]["message"]
    conv = parse_request(body(messages=[{"role": "user", "content": "hi"}, msg]))
    back = conv.messages[1]
    assert back.text == COMPLETION.text and back.tool_calls == COMPLETION.tool_calls
    assert isinstance(back.content[0], TextPart)


def test_error_paths_keep_a_field_named_like_its_union_tag() -> None:
    """A discriminated union's tag is dropped from the path, a field of the same name is not."""
    cases = {
        "response_format.json_schema.name": {
            "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}
        },
        "messages[0].content[0].text": {
            "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]
        },
    }
    for param, extra in cases.items():
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        with pytest.raises(ApiError) as err:
            parse_request(orjson.dumps(body))
        assert err.value.param == param
