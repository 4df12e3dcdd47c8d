"""OpenForge's vLLM client (engines/vllm.py) against the live vLLM server: token-in
completions whose ids and logprobs are the ones vLLM reports, streamed and whole, stop
strings and stop ids, the server's context, structured outputs, greedy determinism, and a
client that goes away aborting its request on the server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.conversation import Conversation, Message, ResponseFormat, SamplingParams, TextPart
from openforge.engines.base import (
    ContextOverflow,
    EngineRequest,
    EngineRequestError,
    TokenChunk,
)
from openforge.engines.vllm import VLLMEngine
from openforge.rendering import load_renderer, load_tokenizer

from .vllm_server import MAX_MODEL_LEN, SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)  # the first test waits for the server to start

QUESTION = "What is the capital of France?"
PARIS = 7042  # SmolLM2's id of " Paris"


def chat_prompt(model_dir: Path, text: str) -> list[int]:
    """OpenForge's prompt ids for one user message (SmolLM2's ChatML)."""
    conv = Conversation(messages=[Message(role="user", content=[TextPart(text)])])
    return load_renderer(model_dir).render(conv).ids


async def collect(
    engine: VLLMEngine, request: EngineRequest
) -> tuple[list[TokenChunk], TokenChunk]:
    """Every chunk the engine yields for ``request``, and the last one."""
    chunks = [chunk async for chunk in engine.generate(request)]
    return chunks, chunks[-1]


def ids_of(chunks: list[TokenChunk]) -> tuple[list[int], list[float]]:
    """The ids and logprobs of ``chunks`` together."""
    return [i for c in chunks for i in c.ids], [lp for c in chunks for lp in c.logprobs]


async def vllm_answer(server: VLLMServer, body: dict[str, Any]) -> dict[str, Any]:
    """vLLM's own whole answer to a completions ``body``: ``choices[0]``."""
    async with httpx.AsyncClient(timeout=120) as client:
        got = await client.post(server.url + "/v1/completions", json={"model": SERVED, **body})
    assert got.status_code == 200, got.text
    choice: dict[str, Any] = got.json()["choices"][0]
    return choice


async def test_ids_and_logprobs_are_vllms_streamed_or_whole_and_greedy_repeats(
    live_vllm: VLLMServer, smollm2: Path
) -> None:
    prompt = chat_prompt(smollm2, QUESTION)
    engine = VLLMEngine(live_vllm.url, model=SERVED)
    greedy = SamplingParams(max_tokens=24, temperature=0.0)
    try:
        streamed, last = await collect(engine, EngineRequest(prompt, greedy))
        whole, whole_last = await collect(engine, EngineRequest(prompt, greedy, stream=False))
        again, _ = await collect(engine, EngineRequest(prompt, greedy))
        sampled, _ = await collect(
            engine, EngineRequest(prompt, SamplingParams(max_tokens=16, temperature=1.0, seed=7))
        )
    finally:
        await engine.close()
    ids, logprobs = ids_of(streamed)
    assert "Paris" in load_tokenizer(smollm2).decode(ids)
    assert last.finish_reason == "stop" and ids[-1] == load_tokenizer(smollm2).eos_id
    assert len(streamed) > 2 and len(whole) == 1 and whole_last.finish_reason == "stop"
    assert ids_of(whole) == (ids, logprobs) and ids_of(again) == (ids, logprobs)
    # What vLLM itself answers for the same ids, asked directly.
    direct = await vllm_answer(
        live_vllm,
        {"prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 0,
         "return_token_ids": True, "skip_special_tokens": False},
    )  # fmt: skip
    assert direct["token_ids"] == ids and direct["logprobs"]["token_logprobs"] == logprobs
    assert direct["prompt_token_ids"] == prompt
    # Sampled with a seed: vLLM's tokens and its processed logprobs, reproduced by the seed.
    s_ids, s_logprobs = ids_of(sampled)
    seeded = await vllm_answer(
        live_vllm,
        {"prompt": prompt, "max_tokens": 16, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
         "seed": 7, "logprobs": 0, "return_token_ids": True},
    )  # fmt: skip
    assert seeded["token_ids"] == s_ids and seeded["logprobs"]["token_logprobs"] == s_logprobs
    assert all(lp <= 0.0 for lp in s_logprobs)


@pytest.mark.parametrize("stream", [True, False])
async def test_stop_strings_and_stop_ids_end_the_answer_and_stay_in_the_ids(
    live_vllm: VLLMServer, smollm2: Path, stream: bool
) -> None:
    prompt = chat_prompt(smollm2, QUESTION)
    engine = VLLMEngine(live_vllm.url, model=SERVED)
    try:
        by_text, text_last = await collect(
            engine,
            EngineRequest(
                prompt,
                SamplingParams(max_tokens=24, temperature=0.0, stop=[" Paris"]),
                stream=stream,
            ),
        )
        by_id, id_last = await collect(
            engine,
            EngineRequest(
                prompt,
                SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=[PARIS]),
                stream=stream,
            ),
        )
        capped, capped_last = await collect(
            engine,
            EngineRequest(prompt, SamplingParams(max_tokens=3, temperature=0.0), stream=stream),
        )
    finally:
        await engine.close()
    text_ids, _ = ids_of(by_text)
    assert text_last.finish_reason == "stop" and text_last.stop_text == " Paris"
    assert text_ids[-1] == PARIS  # the stop string's tokens are kept for training
    assert load_tokenizer(smollm2).decode(text_ids).endswith(" Paris")
    id_ids, _ = ids_of(by_id)
    assert id_last.finish_reason == "stop" and id_last.stop_text is None
    assert id_ids == text_ids
    capped_ids, capped_logprobs = ids_of(capped)
    assert capped_last.finish_reason == "length" and capped_ids == text_ids[:3]
    assert len(capped_logprobs) == 3


async def test_the_servers_shorter_context_is_learned_and_overflow_is_the_clients_error(
    live_vllm: VLLMServer, smollm2: Path
) -> None:
    """vLLM serves 2,048 tokens of SmolLM2's 8,192: the client caps ``max_tokens`` to what
    the server serves (vLLM refuses a ``max_tokens`` past its context), and a prompt past
    it is a :class:`ContextOverflow`, which the gateway answers as a context-length error."""
    prompt = chat_prompt(smollm2, QUESTION)
    engine = VLLMEngine(live_vllm.url, model=SERVED, context_length=8192)
    try:
        # No max_tokens: everything the context has room for.
        _, last = await collect(engine, EngineRequest(prompt, SamplingParams(temperature=0.0)))
        assert last.finish_reason == "stop"
        assert engine.info().context_length == MAX_MODEL_LEN
        _, last = await collect(
            engine, EngineRequest(prompt, SamplingParams(max_tokens=5000, temperature=0.0))
        )
        assert last.finish_reason == "stop"
        too_long = [PARIS] * (MAX_MODEL_LEN + 10)
        with pytest.raises(ContextOverflow) as caught:
            await collect(engine, EngineRequest(too_long, SamplingParams(max_tokens=4)))
        assert (caught.value.prompt_tokens, caught.value.limit) == (len(too_long), MAX_MODEL_LEN)
    finally:
        await engine.close()


async def test_vllms_own_context_refusal_is_a_context_overflow(live_vllm: VLLMServer) -> None:
    """A client that has not learned the server's context (a server whose ``/v1/models``
    says nothing of it) still gets vLLM's 400 as a :class:`ContextOverflow`, and learns."""

    class Unasked(VLLMEngine):
        async def prepare(self) -> bool:
            return True

    too_long = [PARIS] * (MAX_MODEL_LEN + 10)
    for stream in (True, False):
        engine = Unasked(live_vllm.url, model=SERVED, context_length=8192)
        request = EngineRequest(too_long, SamplingParams(max_tokens=4), stream=stream)
        try:
            with pytest.raises(ContextOverflow, match="refused it") as caught:
                await collect(engine, request)
            assert caught.value.limit == MAX_MODEL_LEN
            assert engine.info().context_length == MAX_MODEL_LEN
            with pytest.raises(ContextOverflow, match=r"holds 2048$"):  # now refused here
                await collect(engine, request)
        finally:
            await engine.close()


async def test_structured_outputs_in_the_servers_own_parameter_shape(
    live_vllm: VLLMServer, smollm2: Path
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    prompt = chat_prompt(smollm2, "Name a city and its country, as JSON.")
    engine = VLLMEngine(live_vllm.url, model=SERVED)
    tok = load_tokenizer(smollm2)
    try:
        for fmt in (ResponseFormat("json_schema", schema=schema), ResponseFormat("json_object")):
            chunks, last = await collect(
                engine,
                EngineRequest(
                    prompt, SamplingParams(max_tokens=60, temperature=0.0, response_format=fmt)
                ),
            )
            text = tok.decode(ids_of(chunks)[0])
            assert last.finish_reason == "stop", text
            value = json.loads(text)
            assert isinstance(value, dict)
            assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False)  # compact
            if fmt.schema is not None:
                assert set(value) == {"city", "country"}
        bad = ResponseFormat("json_schema", schema={"type": "no-such-type"})
        with pytest.raises(EngineRequestError, match="no-such-type"):
            await collect(
                engine, EngineRequest(prompt, SamplingParams(max_tokens=5, response_format=bad))
            )
    finally:
        await engine.close()


async def wait_running(server: VLLMServer, want: int, timeout_s: float = 30.0) -> int:
    """Poll vLLM's running-request count until it is ``want`` (returns the last count)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        count = await asyncio.to_thread(server.running_requests)
        if count == want or loop.time() > deadline:
            return count
        await asyncio.sleep(0.2)


COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_client_that_goes_away_aborts_the_request_on_the_server(
    live_vllm: VLLMServer, smollm2: Path, stream: bool
) -> None:
    """Closing the stream (or cancelling a whole answer) closes the connection, and vLLM
    stops decoding: its running-request count falls to 0 long before 1,500 tokens."""
    prompt = load_tokenizer(smollm2).encode(COUNTING)
    engine = VLLMEngine(live_vllm.url, model=SERVED)
    request = EngineRequest(prompt, SamplingParams(max_tokens=1500, temperature=0.0), stream=stream)
    try:
        assert await wait_running(live_vllm, 0) == 0
        if stream:
            chunks = engine.generate(request)
            first = await anext(chunks)
            assert first.ids and first.finish_reason is None
            assert await wait_running(live_vllm, 1) == 1
            await chunks.aclose()  # type: ignore[attr-defined]
        else:
            task = asyncio.create_task(collect(engine, request))
            assert await wait_running(live_vllm, 1) == 1
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await wait_running(live_vllm, 0) == 0
    finally:
        await engine.close()
