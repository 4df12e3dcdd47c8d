"""vLLM and SGLang clients and the replica set, against local servers speaking their APIs."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from openforge.conversation import SamplingParams
from openforge.engines.base import Engine, EngineError, EngineRequest, TokenChunk
from openforge.engines.remote import RemoteEngine, StreamBroken
from openforge.engines.replicas import ReplicaSet
from openforge.engines.sglang import SGLangEngine
from openforge.engines.vllm import VLLMEngine

from .fake_servers import (
    FakeState,
    Served,
    fake_logprob,
    fake_token,
    free_port,
    sglang_app,
    vllm_app,
)

PROMPT = [1, 2, 3, 40, 500]


async def collect(
    engine: Engine, request: EngineRequest
) -> tuple[list[int], list[float], TokenChunk]:
    ids: list[int] = []
    logprobs: list[float] = []
    last = TokenChunk()
    async for chunk in engine.generate(request):
        ids += chunk.ids
        logprobs += chunk.logprobs
        last = chunk
    return ids, logprobs, last


def req(rollout: str | None = None, **params: object) -> EngineRequest:
    return EngineRequest(
        prompt_ids=PROMPT,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        rollout_id=rollout,
        request_id="req-1",
    )


def expected(n: int) -> tuple[list[int], list[float]]:
    ids = [fake_token(PROMPT, i) for i in range(n)]
    return ids, [fake_logprob(t) for t in ids]


@pytest.mark.parametrize("kind", ["vllm", "sglang", "sglang-incremental"])
async def test_tokens_logprobs_and_finish(kind: str) -> None:
    state = FakeState(incremental=kind.endswith("incremental"))
    app = vllm_app(state) if kind == "vllm" else sglang_app(state)
    cls: type[RemoteEngine] = VLLMEngine if kind == "vllm" else SGLangEngine
    async with Served(app) as served:
        engine = cls(served.url, model="m", context_length=64)
        try:
            ids, logprobs, last = await collect(engine, req(max_tokens=6, temperature=0.7, seed=3))
            assert (ids, logprobs) == expected(6) and last.finish_reason == "length"
            stop_text = f"t{fake_token(PROMPT, 2)} "
            ids, _, last = await collect(engine, req(max_tokens=20, stop=[stop_text]))
            assert ids == expected(3)[0]
            assert last.finish_reason == "stop" and last.stop_text == stop_text
            stop_id = fake_token(PROMPT, 4)
            ids, _, last = await collect(engine, req(max_tokens=20, stop_token_ids=[stop_id]))
            assert ids == expected(5)[0] and last.finish_reason == "stop" and last.stop_text is None
            # No max_tokens: capped so prompt + output fit the context.
            ids, _, last = await collect(engine, req())
            assert len(ids) == 64 - len(PROMPT) and last.finish_reason == "length"
            with pytest.raises(EngineError, match="context"):
                await collect(engine, EngineRequest(prompt_ids=[1] * 65, params=SamplingParams()))
        finally:
            await engine.close()
    first = state.requests[0]
    if kind == "vllm":
        assert first["prompt"] == PROMPT and first["stream"] is True
        assert first["return_token_ids"] is True and first["logprobs"] == 0
        assert first["include_stop_str_in_output"] is True and first["max_tokens"] == 6
        assert first["seed"] == 3 and first["temperature"] == 0.7
    else:
        assert first["input_ids"] == PROMPT and first["return_logprob"] is True
        assert first["stream"] is True and first["rid"] == "req-1"
        sp = first["sampling_params"]
        assert sp["max_new_tokens"] == 6 and sp["no_stop_trim"] is True and sp["top_k"] == -1
        assert sp["sampling_seed"] == 3


async def test_sticky_rollouts_and_least_loaded_new_ones() -> None:
    states = [FakeState(), FakeState()]
    async with Served(vllm_app(states[0])) as a, Served(vllm_app(states[1])) as b:
        client = httpx.AsyncClient()
        engines: list[RemoteEngine] = [VLLMEngine(s.url, client=client) for s in (a, b)]
        replicas = ReplicaSet(engines, client=client)
        try:
            # Two new rollouts at once: the second goes to the idle replica.
            await asyncio.gather(
                collect(replicas, req("r1", max_tokens=30)),
                collect(replicas, req("r2", max_tokens=30)),
            )
            assert len(states[0].requests) == 1 and len(states[1].requests) == 1
            first_of_r1 = 0 if states[0].requests else 1
            # r1 stays on its replica even while that one is the busier.
            for _ in range(3):
                await collect(replicas, req("r1", max_tokens=2))
            assert len(states[first_of_r1].requests) == 4
        finally:
            await replicas.close()


async def test_dead_replica_is_skipped_then_probed_back() -> None:
    dead_port = free_port()
    live_state, back_state = FakeState(), FakeState()
    async with Served(vllm_app(live_state)) as live:
        engines: list[RemoteEngine] = [
            VLLMEngine(f"http://127.0.0.1:{dead_port}"),
            VLLMEngine(live.url),
        ]
        replicas = ReplicaSet(engines, probe_interval_s=0.05)
        try:
            ids, _, last = await collect(replicas, req("r1", max_tokens=4))
            assert ids == expected(4)[0] and last.finish_reason == "length"
            assert replicas.alive() == [live.url]
            async with Served(vllm_app(back_state), port=dead_port):
                for _ in range(200):
                    if len(replicas.alive()) == 2:
                        break
                    await asyncio.sleep(0.05)
                assert len(replicas.alive()) == 2
                await collect(replicas, req("fresh", max_tokens=2))
                assert len(back_state.requests) == 1  # least loaded: the revived one
        finally:
            await replicas.close()


async def test_death_mid_stream_fails_the_call_without_retrying() -> None:
    dying, other = FakeState(die_after=3), FakeState()
    async with Served(sglang_app(dying)) as a, Served(sglang_app(other)) as b:
        replicas = ReplicaSet([SGLangEngine(a.url), SGLangEngine(b.url)])
        got: list[int] = []
        try:
            with pytest.raises(StreamBroken):
                async for chunk in replicas.generate(req("r1", max_tokens=10)):
                    got += chunk.ids
            assert got == expected(3)[0]
            assert other.requests == []  # never continued elsewhere
            assert replicas.alive() == [b.url]
        finally:
            await replicas.close()


async def test_weight_updates_reach_every_replica(tmp_path: object) -> None:
    v, s = FakeState(), FakeState()
    async with Served(vllm_app(v)) as va, Served(sglang_app(s)) as sa:
        vllm = VLLMEngine(va.url)
        sglang = SGLangEngine(sa.url)
        try:
            await vllm.update_weights("/ckpt/step-1", "1")
            assert [p for p, _ in v.admin] == [
                "/pause",
                "/collective_rpc",
                "/reset_prefix_cache",
                "/resume",
            ]
            assert v.admin[0][1] == {"mode": "keep"}
            assert v.admin[1][1] == {
                "method": "reload_weights",
                "kwargs": {"weights_path": "/ckpt/step-1"},
            }
            assert vllm.info().weight_version == "1" and not v.paused
            replicas = ReplicaSet([sglang])
            await replicas.update_weights("/ckpt/step-2", "2")
            assert s.admin[-1] == (
                "/update_weights_from_disk",
                {"model_path": "/ckpt/step-2", "weight_version": "2"},
            )
            assert s.weight_version == "2" and sglang.info().weight_version == "2"
            with pytest.raises(EngineError, match="absolute"):
                await sglang.update_weights("relative/path", "3")
            await replicas.pause()
            assert s.paused
            await replicas.resume()
            assert not s.paused
        finally:
            await vllm.close()
            await sglang.close()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["vllm", "sglang"])
async def test_against_a_real_server(kind: str) -> None:
    """Runs where a real engine serves SmolLM2: OPENFORGE_TEST_VLLM_URL / _SGLANG_URL."""
    url = os.environ.get(f"OPENFORGE_TEST_{kind.upper()}_URL")
    if not url:
        pytest.skip(
            f"no real {kind} server: set OPENFORGE_TEST_{kind.upper()}_URL "
            "(needs a GPU machine with the engine installed)"
        )
    from transformers import AutoTokenizer

    from openforge.models.registry import resolve_model

    tok = AutoTokenizer.from_pretrained(str(resolve_model("smollm2-135m")))
    prompt = list(
        tok.apply_chat_template(
            [{"role": "user", "content": "What is the capital of France?"}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
    )
    engine = (VLLMEngine if kind == "vllm" else SGLangEngine)(
        url, model=os.environ.get("OPENFORGE_TEST_SERVED_MODEL", "")
    )
    try:
        ids, logprobs, last = await collect(
            engine,
            EngineRequest(prompt_ids=prompt, params=SamplingParams(max_tokens=24, temperature=0.0)),
        )
        assert "Paris" in tok.decode(ids) and len(logprobs) == len(ids)
        assert last.finish_reason in ("stop", "length")
    finally:
        await engine.close()
