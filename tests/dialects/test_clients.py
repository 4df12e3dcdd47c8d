"""Each wire format's client side against its own server side.

A request a client builds must parse back, through the same dialect the gateway serves,
into the conversation it was built from; an answer the gateway renders must read back
into the completion it was rendered from.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from openforge.conversation import Completion, Conversation, FinishReason, ToolCall, Usage
from openforge.dialects import anthropic, openai_chat
from openforge.dialects.anthropic.client import VERSION, MessagesClient
from openforge.dialects.client import AnswerError, Client, error_message
from openforge.dialects.context import ResponseContext
from openforge.dialects.openai_chat.client import ChatClient

# A real 1x1 PNG: images are decoded and checked as requests are parsed.
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGM4wcUFAAJ6AN1nJ0J9AAAAAElFTkSuQmCC"
)
TOOL = {"type": "object", "properties": {"command": {"type": "string"}}}

CHAT_BODY = {
    "model": "gpt-x",
    "messages": [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in it?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1PX}"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "assistant", "content": "one file"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": TOOL}}],
    "tool_choice": {"type": "function", "function": {"name": "bash"}},
    "parallel_tool_calls": False,
    "max_tokens": 64,
    "temperature": 0.5,
    "top_p": 0.9,
    "stop": ["END"],
    "seed": 7,
}

MESSAGES_BODY = {
    "model": "claude-x",
    "system": "be brief",
    "max_tokens": 64,
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in it?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me look"},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ],
    "tools": [{"name": "bash", "description": "run it", "input_schema": TOOL}],
    "tool_choice": {"type": "any"},
    "temperature": 0.25,
    "top_p": 0.5,
    "stop_sequences": ["END"],
}

Parse = Callable[[bytes], Conversation]
FORMATS: list[tuple[Client, Parse, dict[str, object], list[str]]] = [
    (
        ChatClient(),
        openai_chat.parse_request,
        CHAT_BODY,
        ["system", "user", "assistant", "tool", "assistant", "user"],
    ),
    (
        MessagesClient(),
        anthropic.parse_request,
        MESSAGES_BODY,
        ["system", "user", "assistant", "tool", "user"],
    ),
]


@pytest.mark.parametrize(("client", "parse", "body", "roles"), FORMATS, ids=["chat", "messages"])
def test_a_built_request_parses_back_into_its_conversation(
    client: Client, parse: Parse, body: dict[str, object], roles: list[str]
) -> None:
    conv = parse(orjson.dumps(body))
    assert [m.role for m in conv.messages] == roles
    assert conv.tools and conv.tool_choice.mode == "required" and conv.params.stop == ["END"]
    wire = client.request(conv, conv.model, "sk-test")
    assert parse(wire.body) == conv
    assert wire.headers["Content-Type"] == "application/json"


def test_each_client_names_its_route_and_key() -> None:
    conv = openai_chat.parse_request(orjson.dumps(CHAT_BODY))
    chat = ChatClient().request(conv, "gpt-y", "sk-1")
    assert chat.path == "/chat/completions"
    assert chat.headers["Authorization"] == "Bearer sk-1"
    assert orjson.loads(chat.body)["model"] == "gpt-y"
    messages = MessagesClient().request(conv, "claude-y", "sk-2")
    assert messages.path == "/v1/messages"
    assert messages.headers["x-api-key"] == "sk-2"
    assert messages.headers["anthropic-version"] == VERSION


def test_a_conversation_without_max_tokens_still_sends_the_one_messages_requires() -> None:
    conv = openai_chat.parse_request(
        orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    )
    sent = orjson.loads(MessagesClient().request(conv, "m", "k").body)
    assert sent["max_tokens"] == 4096
    assert "max_tokens" not in orjson.loads(ChatClient().request(conv, "m", "k").body)


Render = Callable[[Completion, ResponseContext], bytes]
ANSWERS: list[tuple[Client, Render]] = [
    (ChatClient(), openai_chat.render_response),
    (MessagesClient(), anthropic.render_response),
]


@pytest.mark.parametrize(("client", "render"), ANSWERS, ids=["chat", "messages"])
@pytest.mark.parametrize("finish", ["stop", "length", "tool_calls"])
def test_a_rendered_answer_reads_back_into_its_completion(
    client: Client, render: Render, finish: FinishReason
) -> None:
    completion = Completion(
        text="here",
        reasoning="thinking it over",
        tool_calls=[ToolCall("call_9", "bash", '{"command":"ls"}')],
        finish_reason=finish,
        usage=Usage(12, 5),
        model="served-model",
    )
    rendered = render(completion, ResponseContext(response_id="x_1", model="served-model"))
    assert client.parse(orjson.loads(rendered), "asked-model") == completion


BARE_ANSWERS: list[tuple[Client, dict[str, object]]] = [
    (ChatClient(), {"choices": [{"message": {"content": "hi"}}]}),
    (MessagesClient(), {"content": [{"type": "text", "text": "hi"}]}),
]


@pytest.mark.parametrize(("client", "data"), BARE_ANSWERS, ids=["chat", "messages"])
def test_an_answer_without_a_model_is_named_by_the_one_asked(
    client: Client, data: dict[str, object]
) -> None:
    answer = client.parse(data, "asked-model")
    assert (answer.text, answer.model, answer.finish_reason) == ("hi", "asked-model", "stop")


def test_an_answer_without_choices_is_an_answer_error() -> None:
    with pytest.raises(AnswerError, match="no choices"):
        ChatClient().parse({"object": "chat.completion", "choices": []}, "m")


def test_error_messages_come_from_the_shared_envelope() -> None:
    assert error_message({"error": {"type": "x", "message": "rate limited"}}) == "rate limited"
    assert error_message({"type": "error", "error": {"message": "overloaded"}}) == "overloaded"
    assert error_message({"error": "plain text"}) == "plain text"
    assert error_message({"error": {"code": 1}}) is None
    assert error_message(["not", "an", "object"]) is None
