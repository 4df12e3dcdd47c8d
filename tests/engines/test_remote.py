"""vLLM and SGLang clients and the replica set, against local servers speaking their APIs."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import orjson
import pytest

from openforge.conversation import SamplingParams
from openforge.engines.base import Engine, EngineError, EngineRequest, TokenChunk
from openforge.engines.remote import RemoteEngine, StreamBroken
from openforge.engines.replicas import ReplicaSet, affinity
from openforge.engines.sglang import SGLangEngine
from openforge.engines.vllm import VLLMEngine

from .fake_servers import (
    FAKE_EOS,
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
    return await _collect(engine, request, [])


async def _collect(
    engine: Engine, request: EngineRequest, counts: list[int]
) -> tuple[list[int], list[float], TokenChunk]:
    """All ids and logprobs, and the last chunk; how many chunks came goes to ``counts``."""
    ids: list[int] = []
    logprobs: list[float] = []
    last = TokenChunk()
    n = 0
    async for chunk in engine.generate(request):
        ids += chunk.ids
        logprobs += chunk.logprobs
        last = chunk
        n += 1
    counts.append(n)
    return ids, logprobs, last


def req(rollout: str | None = None, stream: bool = True, **params: object) -> EngineRequest:
    return EngineRequest(
        prompt_ids=PROMPT,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        rollout_id=rollout,
        request_id="req-1" if rollout is None else f"req-{rollout}",  # where it went
        stream=stream,
    )


def _rollouts(state: FakeState) -> list[str | None]:
    """The rollout of each request a fake server got (from the request id ``req``)."""
    ids = [str(r.get("request_id")) for r in state.requests]
    return [None if i == "req-1" else i.removeprefix("req-") for i in ids]


def expected(n: int) -> tuple[list[int], list[float]]:
    ids = [fake_token(PROMPT, i) for i in range(n)]
    return ids, [fake_logprob(t) for t in ids]


def make(kind: str, **state_options: object) -> tuple[FakeState, Any, type[RemoteEngine]]:
    state = FakeState(**state_options)  # type: ignore[arg-type]
    if kind.startswith("vllm"):
        return state, vllm_app(state), VLLMEngine
    return state, sglang_app(state), SGLangEngine


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
@pytest.mark.parametrize("kind", ["vllm", "vllm-interval", "sglang", "sglang-incremental"])
async def test_tokens_logprobs_and_finish(kind: str, whole: bool) -> None:
    """Streamed, and answered whole (a request that is not streamed: one chunk)."""
    state, app, cls = make(
        kind,
        incremental=kind.endswith("incremental"),
        stream_interval=3 if kind.endswith("interval") else 1,
        # A checkpoint whose generation_config would change the distribution if the
        # client left these fields out (vLLM fills omitted fields from it).
        generation_config={"top_k": 20, "top_p": 0.8, "repetition_penalty": 1.3},
    )
    async with Served(app) as served:
        engine = cls(served.url, model="m", context_length=64)
        chunks: list[int] = []

        async def collect(
            engine: Engine, request: EngineRequest
        ) -> tuple[list[int], list[float], TokenChunk]:
            request.stream = not whole
            return await _collect(engine, request, chunks)

        try:
            ids, logprobs, last = await collect(engine, req(max_tokens=6, temperature=0.7, seed=3))
            assert (ids, logprobs) == expected(6) and last.finish_reason == "length"
            stop_text = f"t{fake_token(PROMPT, 2)} "
            ids, _, last = await collect(engine, req(max_tokens=20, stop=[stop_text]))
            assert ids == expected(3)[0]  # the stop string's tokens are kept
            assert last.finish_reason == "stop" and last.stop_text == stop_text
            stop_id = fake_token(PROMPT, 4)
            ids, _, last = await collect(engine, req(max_tokens=20, stop_token_ids=[stop_id]))
            assert ids == expected(5)[0] and last.finish_reason == "stop" and last.stop_text is None
            # No max_tokens: capped so prompt + output fit the context.
            ids, _, last = await collect(engine, req())
            assert len(ids) == 64 - len(PROMPT) and last.finish_reason == "length"
            with pytest.raises(EngineError, match="context"):
                await collect(engine, EngineRequest(prompt_ids=[1] * 65, params=SamplingParams()))
            state.eos_at = 3  # the model's EOS: kept in the ids, no stop text
            ids, logprobs, last = await collect(engine, req(max_tokens=20))
            assert ids == [*expected(3)[0], FAKE_EOS] and logprobs[-1] == fake_logprob(FAKE_EOS)
            assert last.finish_reason == "stop" and last.stop_text is None
        finally:
            await engine.close()
    assert all(n == 1 for n in chunks) if whole else any(n > 1 for n in chunks)
    first = state.requests[0]
    assert first["stream"] is not whole
    if kind.startswith("vllm"):
        assert first["prompt"] == PROMPT
        assert first["return_token_ids"] is True and first["logprobs"] == 0
        assert first["include_stop_str_in_output"] is True and first["max_tokens"] == 6
        assert first["seed"] == 3 and first["temperature"] == 0.7
        assert first["request_id"] == "req-1" and first["model"] == "m"
        assert state.ignored_fields == []  # every field we send is one vLLM reads
        assert state.effective[0] == {
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "temperature": 0.7,
            "top_p": 1.0,
            "top_k": 0,
            "min_p": 0.0,
        }
    else:
        assert first["input_ids"] == PROMPT and first["return_logprob"] is True
        assert first["rid"] == "req-1"
        assert first["logprob_start_len"] == -1
        sp = first["sampling_params"]
        assert sp["max_new_tokens"] == 6 and sp["no_stop_trim"] is True and sp["top_k"] == -1
        assert sp["sampling_seed"] == 3 and sp["min_p"] == 0.0
        assert sp["repetition_penalty"] == 1.0


async def test_error_event_inside_the_stream_fails_the_call() -> None:
    state = FakeState(error_after=2)
    async with Served(vllm_app(state)) as served:
        engine = VLLMEngine(served.url)
        got: list[int] = []
        try:
            with pytest.raises(EngineError, match="Internal server error"):
                async for chunk in engine.generate(req(max_tokens=10)):
                    got += chunk.ids
            assert got == expected(2)[0]
        finally:
            await engine.close()


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
async def test_a_rendered_prompt_json_is_sent_as_the_prompt(kind: str) -> None:
    """The gateway hands over its prompt already as JSON (kept per segment): it goes out
    verbatim, and the server reads the same prompt as from the ids."""
    state, app, cls = make(kind)
    async with Served(app) as served:
        engine = cls(served.url, model="m", context_length=64)
        try:
            request = req(max_tokens=4)
            request.prompt_json = b"[1, 2,3 ,40,500]"  # spaced: proof it was not re-encoded
            assert orjson.dumps(engine.payload(request)).count(b"[1, 2,3 ,40,500]") == 1
            ids, logprobs, _ = await collect(engine, request)
            assert (ids, logprobs) == expected(4)
        finally:
            await engine.close()
    field = "prompt" if kind == "vllm" else "input_ids"
    assert state.requests[0][field] == PROMPT


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_bad_request_is_an_engine_error_naming_the_field(stream: bool) -> None:
    async with Served(vllm_app(FakeState())) as v, Served(sglang_app(FakeState())) as s:
        vllm, sglang = VLLMEngine(v.url), SGLangEngine(s.url)
        try:
            with pytest.raises(EngineError, match="top_p must be in"):
                await collect(vllm, req(stream=stream, max_tokens=2, top_p=0.0))
            with pytest.raises(EngineError, match="top_p must be in"):
                await collect(sglang, req(stream=stream, max_tokens=2, top_p=0.0))
        finally:
            await vllm.close()
            await sglang.close()


def test_sglang_warns_that_its_logprobs_ignore_filters(caplog: pytest.LogCaptureFixture) -> None:
    engine = SGLangEngine("http://127.0.0.1:1")
    with caplog.at_level("WARNING", logger="openforge.engines.sglang"):
        engine.payload(req(max_tokens=2, temperature=1.0))
        assert not caplog.records
        engine.payload(req(max_tokens=2, temperature=1.0, top_p=0.9))
        engine.payload(req(max_tokens=2, temperature=1.0, top_k=5))
    assert len(caplog.records) == 1 and "before top-k/top-p" in caplog.records[0].message


async def test_rollouts_stick_to_one_replica_the_same_in_every_gateway() -> None:
    states = [FakeState(), FakeState()]
    async with Served(vllm_app(states[0])) as a, Served(vllm_app(states[1])) as b:
        client = httpx.AsyncClient()
        # Two gateways' replica sets over the same servers, routing without talking.
        sets = [ReplicaSet([VLLMEngine(s.url, client=client) for s in (a, b)]) for _ in range(2)]
        rollouts = [f"ro_{i}" for i in range(16)]
        try:
            for i, rollout in enumerate(rollouts * 2):  # each rollout once through each
                await collect(sets[i % 2], req(rollout, max_tokens=2))
            served = [_rollouts(st) for st in states]
            # Each rollout's two calls went to one server, whichever gateway sent them ...
            assert sorted(served[0] + served[1]) == sorted(rollouts * 2)
            assert not set(served[0]) & set(served[1])
            # ... the one its affinity names, and the rollouts spread over both.
            for rollout in rollouts:
                best = max((a.url, b.url), key=lambda url: affinity(rollout, url))
                assert rollout in served[0 if best == a.url else 1]
            assert served[0] and served[1]
            # A call with no rollout goes to the least loaded replica.
            await asyncio.gather(
                collect(sets[0], req(None, max_tokens=30)),
                collect(sets[0], req(None, max_tokens=30)),
            )
            assert _rollouts(states[0]).count(None) == 1
        finally:
            for st in sets:
                await st.close()
            await client.aclose()


async def test_dead_replica_is_skipped_then_probed_back() -> None:
    dead_port = free_port()
    dead_url = f"http://127.0.0.1:{dead_port}"
    live_state, back_state = FakeState(), FakeState()
    async with Served(vllm_app(live_state)) as live:
        engines: list[RemoteEngine] = [VLLMEngine(dead_url), VLLMEngine(live.url)]
        replicas = ReplicaSet(engines, probe_interval_s=0.05)
        # A rollout whose first choice is the dead replica moves, and moves back.
        rollout = next(
            r
            for r in (f"ro_{i}" for i in range(100))
            if affinity(r, dead_url) > affinity(r, live.url)
        )
        try:
            ids, _, last = await collect(replicas, req(rollout, max_tokens=4))
            assert ids == expected(4)[0] and last.finish_reason == "length"
            assert replicas.alive() == [live.url]
            assert _rollouts(live_state) == [rollout]
            async with Served(vllm_app(back_state), port=dead_port):
                for _ in range(200):
                    if len(replicas.alive()) == 2:
                        break
                    await asyncio.sleep(0.05)
                assert len(replicas.alive()) == 2
                await collect(replicas, req(rollout, max_tokens=2))
                assert _rollouts(back_state) == [rollout]
        finally:
            await replicas.close()


async def test_death_mid_stream_fails_the_call_without_retrying() -> None:
    dying, other = FakeState(die_after=3), FakeState()
    async with Served(sglang_app(dying)) as a, Served(sglang_app(other)) as b:
        replicas = ReplicaSet([SGLangEngine(a.url), SGLangEngine(b.url)])
        got: list[int] = []
        names = (f"ro_{i}" for i in range(100))  # a rollout routed to the dying server
        rollout = next(r for r in names if affinity(r, a.url) > affinity(r, b.url))
        try:
            with pytest.raises(StreamBroken):
                async for chunk in replicas.generate(req(rollout, max_tokens=10)):
                    got += chunk.ids
            assert got == expected(3)[0]
            assert other.requests == []  # never continued elsewhere
            assert replicas.alive() == [b.url]
        finally:
            await replicas.close()


@pytest.mark.parametrize(
    ("kind", "failure"),
    [("vllm", "die_after"), ("vllm", "error_after"), ("sglang", "die_after")],
)
async def test_a_whole_answer_that_fails_is_served_by_another_replica(
    kind: str, failure: str
) -> None:
    """Nothing of a whole answer reached anyone before it failed (the server died, or
    answered its internal error): another replica serves the request, and the failed
    one is taken out."""
    failing, app, cls = make(kind, **{failure: 2})
    other, other_app, _ = make(kind)
    async with Served(app) as a, Served(other_app) as b:
        replicas = ReplicaSet([cls(a.url), cls(b.url)])
        names = (f"ro_{i}" for i in range(100))  # a rollout routed to the failing server
        rollout = next(r for r in names if affinity(r, a.url) > affinity(r, b.url))
        try:
            ids, _, last = await collect(replicas, req(rollout, stream=False, max_tokens=5))
            assert ids == expected(5)[0] and last.finish_reason == "length"
            assert len(failing.requests) == 1 and len(other.requests) == 1
            assert replicas.alive() == [b.url]
        finally:
            await replicas.close()


async def test_weight_updates_reach_every_replica() -> None:
    v, s = FakeState(), FakeState()
    async with Served(vllm_app(v)) as va, Served(sglang_app(s)) as sa:
        vllm = VLLMEngine(va.url)
        sglang = SGLangEngine(sa.url)
        try:
            await vllm.update_weights("/ckpt/step-1", "1")
            assert v.admin == [
                ("/pause", {"mode": "wait"}),
                (
                    "/collective_rpc",
                    {
                        "method": "reload_weights",
                        "kwargs": {"weights_path": "/ckpt/step-1", "is_checkpoint_format": True},
                    },
                ),
                ("/reset_prefix_cache", {}),
                ("/resume", {}),
            ]
            assert v.weights_path == "/ckpt/step-1"
            assert vllm.info().weight_version == "1" and v.paused is None
            # A reload the workers refuse: the server is resumed, the version kept.
            with pytest.raises(EngineError, match="No such directory"):
                await vllm.update_weights("relative/step-2", "2")
            assert v.admin[-1] == ("/resume", {}) and v.paused is None
            assert vllm.info().weight_version == "1"
            await vllm.pause()
            assert v.paused == "keep"
            await vllm.resume()
            assert v.paused is None

            replicas = ReplicaSet([sglang])
            await replicas.update_weights("/ckpt/step-2", "2")
            assert s.admin[-1] == (
                "/update_weights_from_disk",
                {
                    "model_path": "/ckpt/step-2",
                    "weight_version": "2",
                    "flush_cache": True,
                    "abort_all_requests": False,
                },
            )
            assert s.weight_version == "2" and sglang.info().weight_version == "2"
            with pytest.raises(EngineError, match="repository not found"):
                await sglang.update_weights("relative/path", "3")
            assert sglang.info().weight_version == "2"
            await replicas.pause()
            assert s.paused == "in_place" and s.admin[-1] == (
                "/pause_generation",
                {"mode": "in_place"},
            )
            await replicas.resume()
            assert s.paused is None and s.admin[-1] == ("/continue_generation", {})
        finally:
            await vllm.close()
            await sglang.close()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["vllm", "sglang"])
async def test_against_a_real_server(kind: str) -> None:
    """Runs where a real engine serves SmolLM2: OPENFORGE_TEST_VLLM_URL / _SGLANG_URL.

    vLLM's CPU build runs here too: tests/live starts one and tests this client (and the
    gateway) against it in every run; this test reaches a server started elsewhere."""
    url = os.environ.get(f"OPENFORGE_TEST_{kind.upper()}_URL")
    if not url:
        where = (
            "tests/live runs a vLLM of its own"
            if kind == "vllm"
            else "SGLang has no CPU build: a GPU machine with SGLang installed"
        )
        pytest.skip(f"no {kind} server given: set OPENFORGE_TEST_{kind.upper()}_URL ({where})")
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
        # Answered whole (a client that does not stream): the same greedy answer, one chunk.
        counts: list[int] = []
        whole = EngineRequest(
            prompt_ids=prompt,
            params=SamplingParams(max_tokens=24, temperature=0.0),
            stream=False,
        )
        assert (await _collect(engine, whole, counts))[0] == ids and counts == [1]
    finally:
        await engine.close()
