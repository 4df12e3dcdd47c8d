"""decode_body: the nesting bound (exact at its edge, on any thread) and ignored fields."""

from __future__ import annotations

import logging
import threading

import orjson
import pytest

from openforge.dialects.errors import MAX_DEPTH, ApiError, decode_body
from openforge.dialects.openai_chat.protocol import ChatCompletionRequest


def _body(depth: int) -> bytes:
    """A chat request whose body nests exactly ``depth`` levels (the body object is 1)."""
    inner: object = {}
    # body(1) > tools list(2) > tool(3) > function(4) > parameters(5) > ... nested dicts
    for _ in range(depth - 5):
        inner = {"a": inner}
    tool = {"type": "function", "function": {"name": "t", "parameters": inner}}
    return orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
    )


def test_nesting_up_to_the_bound_is_accepted_and_one_past_it_refused() -> None:
    decode_body(_body(MAX_DEPTH), ChatCompletionRequest)
    with pytest.raises(ApiError, match=f"deeper than {MAX_DEPTH}"):
        decode_body(_body(MAX_DEPTH + 1), ChatCompletionRequest)
    decode_body(_body(MAX_DEPTH), ChatCompletionRequest)  # the refusal left nothing behind


def test_the_bound_holds_on_worker_threads_too() -> None:
    # Large bodies are parsed on worker threads: each has its own wrapper lists.
    errors: list[BaseException] = []

    def parse() -> None:
        try:
            for _ in range(50):
                decode_body(_body(MAX_DEPTH), ChatCompletionRequest)
                with pytest.raises(ApiError):
                    decode_body(_body(MAX_DEPTH + 1), ChatCompletionRequest)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=parse) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_ignored_fields_of_nested_models_are_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = orjson.dumps(
        {
            "model": "m",
            "store": False,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache": 1}]}],
        }
    )
    decode_body(body, ChatCompletionRequest)
    assert caplog.records == []  # nothing walked or logged unless debug is on
    with caplog.at_level(logging.DEBUG, logger="openforge.dialects.ignored"):
        decode_body(body, ChatCompletionRequest)
    assert "ChatCompletionRequest: ignored fields ['store']" in caplog.text
    assert "ignored fields ['cache']" in caplog.text
