"""Responses: the Codex fixture, history items, and the real openai SDK reading our events."""

from __future__ import annotations

from collections.abc import Callable

import openai
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
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses import (
    ResponsesStreamEncoder,
    parse_request,
    render_error,
    render_response,
)

# A real 1x1 PNG: images are decoded and checked as requests are parsed.
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGM4wcUFAAJ6AN1nJ0J9AAAAAElFTkSuQmCC"
)

Make = Callable[[tuple[int, bytes, str]], openai.OpenAI]
CODEX = "codex-0.171.0.responses.first-call.json"


def test_codex_first_call_parses(harness_body: Callable[[str], bytes]) -> None:
    raw = harness_body(CODEX)
    conv = parse_request(raw)
    assert conv.model == "mock-model" and conv.stream
    assert [m.role for m in conv.messages] == ["developer", "developer", "user", "user"]
    assert conv.messages[0].text.startswith("You are a coding agent running in the Codex CLI")
    assert len(conv.messages[1].content) == 2 and conv.messages[3].text == "say hi"
    names = [t.name for t in conv.tools]
    assert names[:4] == ["exec_command", "write_stdin", "request_user_input", "view_image"]
    assert "multi_agent_v1__spawn_agent" in names and len(names) == 12
    assert conv.ignored_tools == ["web_search"]
    spawn = conv.metadata["tool_namespaces"]["multi_agent_v1__spawn_agent"]
    assert spawn == ["multi_agent_v1", "spawn_agent"]
    md = conv.metadata
    assert md["store"] is False and md["include"] == ["reasoning.encrypted_content"]
    assert md["prompt_cache_key"] and md["client_metadata"]["thread_id"]
    assert md["reasoning"] == {"summary": "auto"} and conv.reasoning
    assert conv.parallel_tool_calls and conv.tool_choice.mode == "auto"


def body(**fields: object) -> bytes:
    base: dict[str, object] = {"model": "m", "input": "hi"}
    base.update(fields)
    return orjson.dumps(base)


def test_history_items_group_into_assistant_turns() -> None:
    conv = parse_request(
        body(
            instructions="be brief",
            input=[
                {"role": "user", "content": "look"},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "at"},
                        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_1PX}"},
                    ],
                },
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "plan"}],
                    "encrypted_content": "gAAA",
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "spawn_agent",
                    "namespace": "multi_agent_v1",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "spawned"},
                {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "x"},
                {"type": "function_call", "call_id": "call_2", "name": "ls", "arguments": "{}"},
            ],
            tools=[
                {"type": "function", "name": "ls", "parameters": {"type": "object"}},
                {"type": "local_shell"},
                {"type": "custom", "name": "apply_patch"},
            ],
            tool_choice={"type": "function", "name": "ls"},
            max_output_tokens=50,
            previous_response_id="resp_0",
            include=["message.output_text.logprobs"],
            top_logprobs=2,
        )
    )
    roles = [m.role for m in conv.messages]
    assert roles == ["system", "user", "user", "assistant", "tool", "assistant"]
    assert isinstance(conv.messages[2].content[1], ImagePart)
    first = conv.messages[3]
    assert first.reasoning == "plan" and first.text == "ok"
    assert first.tool_calls == [ToolCall("call_1", "multi_agent_v1__spawn_agent", "{}")]
    assert conv.messages[4].tool_call_id == "call_1"
    assert conv.messages[5].tool_calls[0].id == "call_2"
    assert conv.metadata["ignored_items"] == 1  # encrypted-only reasoning
    assert conv.ignored_tools == ["local_shell", "apply_patch"]
    assert conv.tool_choice.name == "ls" and conv.params.max_tokens == 50
    assert conv.params.logprobs and conv.params.top_logprobs == 2
    assert conv.metadata["previous_response_id"] == "resp_0"


NS = {
    "type": "namespace",
    "name": "mcp__t",
    "description": "Tools in the mcp__t namespace.",
    "tools": [{"type": "function", "name": "a", "parameters": {"type": "object"}}],
}


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (orjson.dumps({"input": "x"}), "model"),
        (body(input=[{"type": "message", "role": "robot", "content": "x"}]), "input[0].role"),
        (body(input=[{"type": "function_call", "name": "x"}]), None),
        (body(max_output_tokens=0), "max_output_tokens"),
        (b"", None),
        # Namespace tools (Codex's MCP servers) are checked as strictly as top-level ones.
        (body(tools=[{"type": "namespace", "name": "mcp__t"}]), "tools[0].tools"),
        (body(tools=[{"type": "namespace", "tools": []}]), "tools[0].name"),
        (body(tools=[{"type": "namespace", "name": "", "tools": []}]), "tools[0].name"),
        (body(tools=[{"type": "namespace", "name": "n", "tools": "x"}]), "tools[0].tools"),
        (body(tools=[NS | {"tools": [{"type": "function"}]}]), "tools[0].tools[0].name"),
        (
            body(tools=[NS | {"tools": [{"type": "function", "name": "a", "parameters": 3}]}]),
            "tools[0].tools[0].parameters",
        ),
        (
            body(tools=[{"type": "function", "name": "mcp__t__a"}, NS]),
            "tools[1].tools[0].name",
        ),
    ],
)
def test_bad_requests(raw: bytes, param: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_request(raw)
    if param is not None:
        assert info.value.param == param
    status, payload = render_error(info.value)
    assert status == 400 and "error" in orjson.loads(payload)
    if param is not None:
        assert param in orjson.loads(payload)["error"]["message"]


def test_an_mcp_namespace_is_served_under_codexs_flat_name_and_answered_split() -> None:
    """Codex's MCP tools: the prompt names ``mcp__t__a`` (the name Claude Code gives the
    same tool), the history's namespaced call reads back under it, and an answer calling it
    carries ``namespace`` again so Codex dispatches it to its MCP server."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "a", "namespace": "mcp__t",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]  # fmt: skip
    other = {"type": "other_kind", "name": "b"}
    conv = parse_request(body(input=history, tools=[NS | {"tools": [*NS["tools"], other]}]))
    assert [t.name for t in conv.tools] == ["mcp__t__a"]
    assert conv.tools[0].parameters == {"type": "object"}
    assert conv.ignored_tools == ["mcp__t/b"]
    assert conv.messages[1].tool_calls == [ToolCall("c1", "mcp__t__a", "{}")]
    c = ResponseContext.for_request(conv, "resp_1", created=1)
    done = Completion(tool_calls=[ToolCall("c2", "mcp__t__a", "{}")], finish_reason="tool_calls")
    (item,) = orjson.loads(render_response(done, c))["output"]
    assert (item["namespace"], item["name"]) == ("mcp__t", "a")


def ctx(raw: bytes | None = None, **kw: object) -> ResponseContext:
    conv = parse_request(raw or body())
    return ResponseContext.for_request(conv, "resp_abc", created=1, **kw)  # type: ignore[arg-type]


COMPLETION = Completion(
    text="Spawning.",
    reasoning="Need a helper.",
    tool_calls=[ToolCall("call_7", "multi_agent_v1__spawn_agent", '{"message": "hi"}')],
    finish_reason="tool_calls",
    usage=Usage(20, 9),
)


def test_sdk_reads_json_response(openai_client: Make, harness_body: Callable[[str], bytes]) -> None:
    c = ctx(harness_body(CODEX))
    client = openai_client((200, render_response(COMPLETION, c), "application/json"))
    resp = client.responses.create(model="m", input="x")
    assert resp.id == "resp_abc" and resp.status == "completed"
    assert [o.type for o in resp.output] == ["reasoning", "message", "function_call"]
    assert resp.output_text == "Spawning."
    call = resp.output[2]
    assert call.type == "function_call" and call.call_id == "call_7"
    assert call.name == "spawn_agent" and call.namespace == "multi_agent_v1"
    assert resp.usage is not None and resp.usage.total_tokens == 29


def stream_bytes(enc: ResponsesStreamEncoder, completion: Completion) -> bytes:
    return b"".join(
        [
            enc.start(),
            enc.delta(ReasoningDelta("Need a ")),
            enc.delta(ReasoningDelta("helper.")),
            enc.delta(TextDelta("Spawn")),
            enc.delta(TextDelta("ing.")),
            enc.delta(ToolCallStart(0, "call_7", "multi_agent_v1__spawn_agent")),
            enc.delta(ToolCallArgumentsDelta(0, '{"message": ')),
            enc.delta(ToolCallArgumentsDelta(0, '"hi"}')),
            enc.finish(completion),
        ]
    )


EXPECTED = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.reasoning_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
]


def test_sdk_parses_every_event_in_order(
    openai_client: Make, harness_body: Callable[[str], bytes]
) -> None:
    raw = stream_bytes(ResponsesStreamEncoder(ctx(harness_body(CODEX))), COMPLETION)
    client = openai_client((200, raw, "text/event-stream"))
    events = list(client.responses.create(model="m", input="x", stream=True))
    assert [e.type for e in events] == EXPECTED
    assert [e.sequence_number for e in events] == list(range(len(EXPECTED)))
    # Every SSE event name matches its payload type (Codex and the SDK read either).
    names = [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]
    assert names == EXPECTED
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [e.output_index for e in done] == [0, 1, 2]
    call = done[2].item
    assert call.type == "function_call" and call.arguments == '{"message": "hi"}'
    assert call.namespace == "multi_agent_v1" and call.name == "spawn_agent"
    final = events[-1]
    assert final.type == "response.completed"
    assert [o.id for o in final.response.output] == [e.item.id for e in done]
    assert final.response.usage is not None and final.response.usage.output_tokens == 9


def test_sdk_stream_helper_final_response(openai_client: Make) -> None:
    plain = Completion(
        text="Spawning.", output_ids=[1, 2], output_logprobs=[-0.1, -0.2], usage=Usage(3, 2)
    )
    asked = body(include=["message.output_text.logprobs"])
    enc = ResponsesStreamEncoder(ctx(asked, token_text=lambda i: f"<{i}>"))
    raw = enc.start() + enc.delta(TextDelta("Spawn")) + enc.delta(TextDelta("ing."))
    raw += enc.finish(plain)
    client = openai_client((200, raw, "text/event-stream"))
    with client.responses.stream(model="m", input="x") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Spawning." and final.output_text == "Spawning."
    part = final.output[0].model_dump()["content"][0]
    assert part["type"] == "output_text"
    assert [(lp["token"], lp["logprob"]) for lp in part["logprobs"]] == [
        ("<1>", -0.1),
        ("<2>", -0.2),
    ]


def test_length_finish_is_incomplete() -> None:
    enc = ResponsesStreamEncoder(ctx())
    raw = (
        enc.start()
        + enc.delta(TextDelta("cut"))
        + enc.finish(Completion(text="cut", finish_reason="length", usage=Usage(1, 1)))
    )
    last = orjson.loads(raw.decode().strip().splitlines()[-1][6:])
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_in_band_failure_carries_codex_codes() -> None:
    enc = ResponsesStreamEncoder(ctx())
    raw = enc.start() + enc.error(ApiError.context_length(9000, 8192))
    last = orjson.loads(raw.decode().strip().splitlines()[-1][6:])
    assert last["type"] == "response.failed" and last["sequence_number"] == 2
    assert last["response"]["status"] == "failed"
    assert last["response"]["error"]["code"] == "context_length_exceeded"
    over = orjson.loads(enc.error(ApiError("overloaded", "busy")).decode().split("data: ")[1])
    assert over["response"]["error"]["code"] == "server_is_overloaded"


def test_sdk_sees_failed_event(openai_client: Make) -> None:
    enc = ResponsesStreamEncoder(ctx())
    raw = enc.start() + enc.delta(TextDelta("pa")) + enc.error(ApiError("internal", "engine died"))
    client = openai_client((200, raw, "text/event-stream"))
    events = list(client.responses.create(model="m", input="x", stream=True))
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None and failed.response.error.message == "engine died"


def test_roundtrip_output_items_parse_back() -> None:
    out = orjson.loads(render_response(COMPLETION, ctx()))["output"]
    conv = parse_request(body(input=[{"role": "user", "content": "go"}, *out]))
    asst = conv.messages[-1]
    assert asst.reasoning == COMPLETION.reasoning and asst.text == COMPLETION.text
    assert asst.tool_calls == COMPLETION.tool_calls
