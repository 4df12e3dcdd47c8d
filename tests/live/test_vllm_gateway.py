"""The gateway in front of the live vLLM server, as ``openforge gateway --engine vllm`` runs
it, asked by the harnesses' own SDKs: what it records is what vLLM sampled and what the
trainer recomputes; stops, context errors in each dialect's shape, structured outputs, and
a client that hangs up aborting the request on vLLM."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from openforge.engines.registry import create_engine
from openforge.gateway.server import Gateway
from openforge.store.sqlite import SqliteStore
from openforge.traces.samples import Mode, TraceOptions
from openforge.traces.source import open_store, plan_rollouts
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer

from .test_vllm_engine import COUNTING, vllm_answer, wait_running
from .vllm_server import MAX_MODEL_LEN, SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)

QUESTION: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]


@asynccontextmanager
async def gateway(server: VLLMServer, model: Path, store: Path) -> AsyncIterator[Gateway]:
    """A gateway on the live server, its engine made as ``--engine vllm --url URL --model
    DIR --served-model smollm2`` makes it (context from the model's config: 8,192)."""
    engine = create_engine("vllm", urls=[server.url], model=str(model), served_model=SERVED)
    async with Gateway(engine, SqliteStore(store), model=model) as gw:
        yield gw


async def new_rollout(gw: Gateway) -> dict[str, Any]:
    """A rollout's URLs and key from the admin API."""
    async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
        made = await admin.post(gw.admin_url + "/rollouts", json={"task_id": "live"})
    assert made.status_code == 201, made.text
    rollout: dict[str, Any] = made.json()
    return rollout


async def recorded_calls(gw: Gateway, rollout_id: str) -> list[dict[str, Any]]:
    """The rollout's calls with their ids and logprobs, as the admin API returns them."""
    async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
        got = await admin.get(f"{gw.admin_url}/rollouts/{rollout_id}", params={"tokens": 1})
    calls: list[dict[str, Any]] = got.json()["calls"]
    return calls


async def test_recorded_ids_and_logprobs_are_vllms_and_the_trainer_recomputes_them(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    async with gateway(live_vllm, smollm2, tmp_path / "store.db") as gw:
        rollout = await new_rollout(gw)
        oai = openai.AsyncOpenAI(base_url=rollout["openai_base_url"], api_key="unused")
        try:
            whole = await oai.chat.completions.create(
                model="m",
                messages=QUESTION,
                temperature=0,
                max_tokens=24,
            )
            streamed = ""
            stream = await oai.chat.completions.create(
                model="m", messages=QUESTION, temperature=0, max_tokens=24, stream=True,
            )  # fmt: skip
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    streamed += chunk.choices[0].delta.content
            reply = whole.choices[0].message.content or ""
            follow_up: list[Any] = [
                *QUESTION,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "And of Italy?"},
            ]
            sampled = await oai.chat.completions.create(
                model="m", messages=follow_up, temperature=1.0, seed=11, max_tokens=32,
            )  # fmt: skip
        finally:
            await oai.close()
        calls = await recorded_calls(gw, rollout["rollout_id"])
    assert "Paris" in reply and streamed == reply
    assert sampled.choices[0].message.content
    assert [c["status"] for c in calls] == ["ok"] * 3
    # The follow-up extends the first call's prompt and sampled reply token for token.
    first, follow = calls[0], calls[2]
    assert follow["prompt_ids"][: len(first["prompt_ids"]) + len(first["output_ids"])] == (
        first["prompt_ids"] + first["output_ids"]
    )
    # vLLM asked directly with the recorded prompt ids answers with the recorded ids and
    # logprobs, exactly.
    asked = [(calls[0], 0.0, None, 24), (calls[1], 0.0, None, 24), (follow, 1.0, 11, 32)]
    for call, temperature, seed, max_tokens in asked:
        direct = await vllm_answer(
            live_vllm,
            {"prompt": call["prompt_ids"], "max_tokens": max_tokens, "temperature": temperature,
             "seed": seed, "top_p": 1.0, "top_k": 0, "logprobs": 0, "return_token_ids": True},
        )  # fmt: skip
        assert direct["token_ids"] == call["output_ids"]
        assert direct["logprobs"]["token_logprobs"] == call["output_logprobs"]
    # The trainer's own recomputation from the store's samples (float32, temperature 1: the
    # distribution both the greedy and the sampled calls report).
    source = open_store(tmp_path / "store.db")
    try:
        options = TraceOptions(mode=Mode.PER_CALL, include_running=True)
        (plan,) = await plan_rollouts(source, [rollout["rollout_id"]], options)
    finally:
        await source.close()
    samples = plan.samples
    # The repeated greedy call is the same node of the rollout's graph: one sample.
    assert {tuple(s.response_ids) for s in samples} == {tuple(c["output_ids"]) for c in calls}
    trainer = Trainer(TrainConfig(model=str(smollm2), dtype="float32"), smollm2, device="cpu")
    recomputed = trainer.token_logprobs(samples)
    diffs = [
        abs(engine_lp - trainer_lp)
        for s, row in zip(samples, recomputed, strict=True)
        for engine_lp, trainer_lp in zip(
            [lp for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m], row, strict=True
        )
    ]
    print(f"vLLM vs trainer logprobs over {len(diffs)} tokens: max |diff| {max(diffs):.2e}")
    assert len(diffs) == sum(len(s.response_ids) for s in samples)
    assert max(diffs) < 1e-3


async def test_stop_strings_are_cut_from_the_text_and_kept_in_the_ids(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    async with gateway(live_vllm, smollm2, tmp_path / "store.db") as gw:
        rollout = await new_rollout(gw)
        oai = openai.AsyncOpenAI(base_url=rollout["openai_base_url"], api_key="unused")
        claude = anthropic.AsyncAnthropic(base_url=rollout["anthropic_base_url"], api_key="unused")
        try:
            free = await oai.chat.completions.create(
                model="m",
                messages=QUESTION,
                temperature=0,
                max_tokens=24,
            )
            full = free.choices[0].message.content or ""
            before = full[: full.index("Paris")]
            cut = await oai.chat.completions.create(
                model="m", messages=QUESTION, temperature=0, max_tokens=24, stop=["Paris"],
            )  # fmt: skip
            streamed = ""
            stream = await oai.chat.completions.create(
                model="m", messages=QUESTION, temperature=0, max_tokens=24, stop=["Paris"],
                stream=True,
            )  # fmt: skip
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    streamed += chunk.choices[0].delta.content
            async with claude.messages.stream(
                model="m", max_tokens=24, messages=QUESTION,
                stop_sequences=["Paris"], extra_body={"temperature": 0},
            ) as events:  # fmt: skip
                text = "".join([t async for t in events.text_stream])
                final = await events.get_final_message()
        finally:
            await oai.close()
            await claude.close()
        calls = await recorded_calls(gw, rollout["rollout_id"])
    assert cut.choices[0].message.content == before and cut.choices[0].finish_reason == "stop"
    assert streamed == before and text == before
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "Paris"
    # vLLM's ids run up to and including the stop string's token: trained as sampled.
    stopped = [c["output_ids"] for c in calls[1:]]
    assert all(ids == stopped[0] for ids in stopped)
    assert calls[0]["output_ids"][: len(stopped[0])] == stopped[0]
    assert len(stopped[0]) < len(calls[0]["output_ids"])


async def test_a_prompt_past_the_servers_context_is_each_dialects_context_error(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    """The gateway's model config says 8,192 tokens; vLLM serves 2,048. A 3,000-token prompt
    passes the gateway's own check and is refused by the engine client, in each dialect's
    shape (Claude Code compacts on Anthropic's sentence, Codex on OpenAI's code)."""
    long = "apple " * 3000
    async with gateway(live_vllm, smollm2, tmp_path / "store.db") as gw:
        rollout = await new_rollout(gw)
        messages = [{"role": "user", "content": long}]
        async with httpx.AsyncClient(timeout=120) as client:
            chat = await client.post(
                rollout["openai_base_url"] + "/chat/completions",
                json={"model": "m", "messages": messages, "max_tokens": 5},
            )
            chat_stream = await client.post(
                rollout["openai_base_url"] + "/chat/completions",
                json={"model": "m", "messages": messages, "max_tokens": 5, "stream": True},
            )
            responses = await client.post(
                rollout["openai_base_url"] + "/responses",
                json={"model": "m", "input": long, "max_output_tokens": 16},
            )
            messages_api = await client.post(
                rollout["anthropic_base_url"] + "/v1/messages",
                json={"model": "m", "messages": messages, "max_tokens": 5},
            )
            # max_tokens past the server's context, on a short prompt: capped, answered.
            capped = await client.post(
                rollout["openai_base_url"] + "/chat/completions",
                json={"model": "m", "messages": QUESTION, "max_tokens": 5000, "temperature": 0},
            )
        calls = await recorded_calls(gw, rollout["rollout_id"])
    for got in (chat, chat_stream, responses):
        assert got.status_code == 400, got.text
        error = got.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error["message"]
    assert messages_api.status_code == 400
    body = messages_api.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long: ")
    assert body["error"]["message"].endswith(f" tokens > {MAX_MODEL_LEN} maximum")
    assert capped.status_code == 200, capped.text
    assert "Paris" in capped.json()["choices"][0]["message"]["content"]
    # Refused as the request's fault, never as an engine failure (which marks infra errors).
    assert [c["status"] for c in calls] == ["rejected"] * 4 + ["ok"]


async def test_structured_outputs_through_the_gateway(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": False,
    }
    async with gateway(live_vllm, smollm2, tmp_path / "store.db") as gw:
        rollout = await new_rollout(gw)
        url = rollout["openai_base_url"] + "/chat/completions"
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.post(
                url,
                json={
                    "model": "m", "messages": QUESTION, "max_tokens": 60, "temperature": 0,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "city", "schema": schema}},
                },
            )  # fmt: skip
            bad = await client.post(
                url,
                json={
                    "model": "m", "messages": QUESTION, "max_tokens": 5,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "x", "schema": {"type": "nope"}}},
                },
            )  # fmt: skip
    assert answer.status_code == 200, answer.text
    value = json.loads(answer.json()["choices"][0]["message"]["content"])
    assert set(value) == {"city", "population"} and isinstance(value["population"], int)
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert "nope" in bad.json()["error"]["message"]


async def test_a_harness_that_hangs_up_aborts_the_request_on_vllm(
    live_vllm: VLLMServer, smollm2: Path, tmp_path: Path
) -> None:
    async with gateway(live_vllm, smollm2, tmp_path / "store.db") as gw:
        rollout = await new_rollout(gw)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": f"Continue counting: {COUNTING}"}],
            "max_tokens": 1500,
            "temperature": 0,
            "stream": True,
        }
        assert await wait_running(live_vllm, 0) == 0
        async with (
            httpx.AsyncClient(timeout=120) as client,
            client.stream("POST", rollout["openai_base_url"] + "/chat/completions", json=body) as r,
        ):
            assert r.status_code == 200
            lines = r.aiter_lines()
            async for line in lines:
                if line.startswith("data: {") and '"content"' in line:
                    break
            assert await wait_running(live_vllm, 1) == 1
        # The connection is closed: the gateway cancels the call and vLLM stops decoding.
        assert await wait_running(live_vllm, 0) == 0
        for _ in range(100):
            calls = await recorded_calls(gw, rollout["rollout_id"])
            if calls:
                break
            await asyncio.sleep(0.1)
    (call,) = calls
    assert call["status"] == "client_aborted" and 0 < len(call["output_ids"]) < 1500
