"""The local transformers engine on the ``tiny`` model (and one test on real SmolLM2)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from openforge.conversation import SamplingParams
from openforge.engines.base import Engine, EngineError, EngineRequest, TokenChunk
from openforge.engines.local import LocalEngine
from openforge.engines.sampling import filtered_logprobs


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    eng = LocalEngine("tiny", threads=1)
    yield eng
    asyncio.run(eng.close())


async def run(
    engine: LocalEngine, prompt: list[int], context_length: int | None = None, **params: object
) -> tuple[list[int], list[float], TokenChunk]:
    ids: list[int] = []
    logprobs: list[float] = []
    last = TokenChunk()
    request = EngineRequest(
        prompt_ids=prompt,
        params=SamplingParams(**params),  # type: ignore[arg-type]
        context_length=context_length,
    )
    async for chunk in engine.generate(request):
        ids += chunk.ids
        logprobs += chunk.logprobs
        last = chunk
    return ids, logprobs, last


def rescored(engine: LocalEngine, prompt: list[int], out: list[int]) -> torch.Tensor:
    """Logits at each generated position, from one plain forward pass over the same ids."""
    with torch.inference_mode():
        logits = engine.model(torch.tensor([prompt + out])).logits[0]
    result: torch.Tensor = logits[len(prompt) - 1 : -1].float()
    return result


async def settles(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` becomes true while the worker runs a few more steps."""
    for _ in range(1000):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()


def encode(engine: LocalEngine, text: str) -> list[int]:
    return list(engine.tokenizer.encode(text))


def test_is_an_engine(engine: LocalEngine) -> None:
    assert isinstance(engine, Engine)
    info = engine.info()
    assert info.kind == "local" and info.context_length == 8192 and info.weight_version == "0"


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 0, 1.0), (0.8, 40, 0.9)]
)
async def test_logprobs_match_a_separate_forward_pass(
    engine: LocalEngine, temperature: float, top_k: int, top_p: float
) -> None:
    prompt = encode(engine, "The quick brown fox")
    out, logprobs, last = await run(
        engine, prompt, max_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, seed=7
    )
    assert len(out) == len(logprobs) == 12 and last.finish_reason == "length"
    ref = filtered_logprobs(rescored(engine, prompt, out), temperature, top_k, top_p)
    expected = ref.gather(-1, torch.tensor(out)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)


async def test_greedy_reports_the_unscaled_logprobs(engine: LocalEngine) -> None:
    prompt = encode(engine, "Once upon a time")
    # 100 tokens outgrow the KV buffers' first allocation (prompt + 64): growth is covered.
    out, logprobs, _ = await run(engine, prompt, max_tokens=100, temperature=0.0)
    logits = rescored(engine, prompt, out)
    assert out == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)


async def test_same_seed_same_sample(engine: LocalEngine) -> None:
    prompt = encode(engine, "Pick a number")
    first = await run(engine, prompt, max_tokens=10, temperature=1.0, seed=3)
    again = await run(engine, prompt, max_tokens=10, temperature=1.0, seed=3)
    assert first[0] == again[0]


async def test_batching_keeps_each_output_identical(engine: LocalEngine) -> None:
    texts = ["Hello", "A much longer prompt about many different things", "x y", "Tell me"]
    prompts = [encode(engine, t) for t in texts]
    lengths = [90, 16, 40, 70]  # rows leave at different steps; others keep growing
    alone = [
        await run(engine, p, max_tokens=n, temperature=0.0)
        for p, n in zip(prompts, lengths, strict=True)
    ]
    seeded_alone = await run(engine, prompts[1], max_tokens=16, temperature=0.9, seed=11)

    async def staggered(i: int, prompt: list[int]) -> tuple[list[int], list[float], TokenChunk]:
        await asyncio.sleep(0.02 * i)  # later arrivals join a batch already decoding
        return await run(engine, prompt, max_tokens=lengths[i], temperature=0.0)

    together = await asyncio.gather(
        *(staggered(i, p) for i, p in enumerate(prompts)),
        run(engine, prompts[1], max_tokens=16, temperature=0.9, seed=11),
    )
    for one, batched in zip([*alone, seeded_alone], together, strict=True):
        assert batched[0] == one[0]
        assert torch.allclose(torch.tensor(batched[1]), torch.tensor(one[1]), atol=1e-3)


async def test_max_tokens_and_context_cap(engine: LocalEngine) -> None:
    prompt = encode(engine, "Count with me")
    out, _, last = await run(engine, prompt, max_tokens=5, temperature=0.0)
    assert len(out) == 5 and last.finish_reason == "length"
    out, _, last = await run(
        engine, prompt, context_length=len(prompt) + 3, max_tokens=50, temperature=0.0
    )
    assert len(out) == 3 and last.finish_reason == "length"
    with pytest.raises(EngineError, match="context"):
        await run(engine, prompt, context_length=len(prompt) - 1)


async def test_stop_string_ends_with_its_tokens(engine: LocalEngine) -> None:
    prompt = encode(engine, "Write something")
    full, _, _ = await run(engine, prompt, max_tokens=24, temperature=0.0)
    text = engine.tokenizer.decode(full)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    out, logprobs, last = await run(engine, prompt, max_tokens=24, temperature=0.0, stop=[stop])
    assert last.finish_reason == "stop" and last.stop_text == stop
    assert out == full[: len(out)] and len(logprobs) == len(out)
    assert stop in engine.tokenizer.decode(out)
    assert stop not in engine.tokenizer.decode(out[:-1])


async def test_stop_token_id_is_included(engine: LocalEngine) -> None:
    prompt = encode(engine, "Write something")
    full, _, _ = await run(engine, prompt, max_tokens=24, temperature=0.0)
    stop_id = full[6]
    out, _, last = await run(
        engine, prompt, max_tokens=24, temperature=0.0, stop_token_ids=[stop_id]
    )
    assert last.finish_reason == "stop" and out == full[: full.index(stop_id) + 1]


async def test_cancelling_the_consumer_frees_the_slot(engine: LocalEngine) -> None:
    prompt = encode(engine, "Go on forever")
    started = asyncio.Event()

    async def consume() -> None:
        request = EngineRequest(prompt_ids=prompt, params=SamplingParams(max_tokens=5000))
        async for _ in engine.generate(request):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    assert await settles(lambda: engine.active == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await settles(lambda: engine.active == 0)  # the worker drops it between steps
    out, _, last = await run(engine, prompt, max_tokens=3, temperature=0.0)
    assert len(out) == 3 and last.finish_reason == "length"


async def test_weight_updates_take_effect(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    eng = LocalEngine("tiny", threads=1)
    try:
        prompt = encode(eng, "Weights")
        before, _, _ = await run(eng, prompt, max_tokens=8, temperature=0.0)
        other = AutoModelForCausalLM.from_pretrained(str(eng.path))
        with torch.no_grad():
            for p in other.parameters():
                p.add_(torch.randn_like(p, generator=torch.Generator().manual_seed(5)))
        other.save_pretrained(str(tmp_path / "v1"))
        await eng.update_weights(str(tmp_path / "v1"), "v1")
        assert eng.info().weight_version == "v1"
        after, _, _ = await run(eng, prompt, max_tokens=8, temperature=0.0)
        assert after != before
        with torch.inference_mode():
            logits = other(torch.tensor([prompt + after])).logits[0, len(prompt) - 1 : -1]
        assert after == logits.argmax(-1).tolist()
        state = {
            k: v.clone()
            for k, v in AutoModelForCausalLM.from_pretrained(str(eng.path)).state_dict().items()
        }
        await eng.load_state_dict(state, "v2")
        assert eng.info().weight_version == "v2"
        assert (await run(eng, prompt, max_tokens=8, temperature=0.0))[0] == before
        with pytest.raises(EngineError, match="do not fit"):
            await eng.load_state_dict({"nonsense": torch.zeros(1)}, "bad")
        assert eng.info().weight_version == "v2"
    finally:
        await eng.close()


async def test_close_aborts_running_requests() -> None:
    eng = LocalEngine("tiny", threads=1)
    prompt = encode(eng, "Never ending")
    seen: list[TokenChunk] = []
    started = asyncio.Event()

    async def consume() -> None:
        request = EngineRequest(prompt_ids=prompt, params=SamplingParams(max_tokens=5000))
        async for chunk in eng.generate(request):
            seen.append(chunk)
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    await eng.close()
    await task
    assert seen[-1].finish_reason == "abort"
    with pytest.raises(EngineError, match="closed"):
        await run(eng, prompt)


@pytest.mark.slow
async def test_smollm2_answers_paris_with_rescorable_logprobs() -> None:
    eng = LocalEngine("smollm2-135m")
    try:
        prompt = list(
            eng.tokenizer.apply_chat_template(
                [{"role": "user", "content": "What is the capital of France?"}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        out, logprobs, last = await run(eng, prompt, max_tokens=24, temperature=0.0)
        assert "Paris" in eng.tokenizer.decode(out)
        assert last.finish_reason in ("stop", "length")
        logits = rescored(eng, prompt, out)
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)
    finally:
        await eng.close()


async def test_prefix_cache_reuses_a_finished_call_exactly() -> None:
    eng = LocalEngine("tiny", threads=1)
    try:
        system = encode(eng, "You are a careful agent. " * 6)  # the shared system prompt
        first = [*system, *encode(eng, "Task one.")]
        out, _, _ = await run(eng, first, max_tokens=10, temperature=0.0)
        assert await settles(lambda: len(eng.prefix_cache.entries) == 1)  # kept once dropped
        assert eng.prefix_cache.hits == 0
        # the same rollout's next call (prompt + answer + observation), and another rollout
        # sharing only the system prompt, admitted together
        follow = [*first, *out, *encode(eng, " Result: ok. Next?")]
        other = [*system, *encode(eng, "Task two is different.")]
        results = await asyncio.gather(
            run(eng, follow, max_tokens=12, temperature=0.0),
            run(eng, other, max_tokens=12, temperature=0.0),
        )
        assert eng.prefix_cache.hits == 2
        # rows with close shared lengths are prefilled in one pass, from the shorter one
        assert eng.prefix_cache.reused_tokens >= 2 * len(system)
        for prompt, (ids, logprobs, _) in zip([follow, other], results, strict=True):
            logits = rescored(eng, prompt, ids)
            assert ids == logits.argmax(-1).tolist()
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
            assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-3)
        # new weights: the cached keys and values are stale and dropped
        await eng.load_state_dict(eng.model.state_dict(), "v1")
        assert eng.prefix_cache.entries == []
    finally:
        await eng.close()
