"""End to end on CPU: the gateway serving SmolLM2 through the local engine, asked by the SDK."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from openforge.engines.local import LocalEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore


@pytest.mark.slow
async def test_openai_sdk_gets_paris_and_recorded_logprobs_rescore(tmp_path: Path) -> None:
    model_dir = resolve_model("smollm2-135m")
    engine = LocalEngine("smollm2-135m")
    async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=model_dir) as gw:
        async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
            made = await admin.post(gw.admin_url + "/rollouts", json={"task_id": "paris"})
            assert made.status_code == 201, made.text
            rollout: dict[str, Any] = made.json()
        client = openai.AsyncOpenAI(base_url=rollout["openai_base_url"], api_key="unused")
        try:
            answer = await client.chat.completions.create(
                model="smollm2",
                temperature=0,
                max_tokens=30,
                messages=[{"role": "user", "content": "What is the capital of France?"}],
            )
        finally:
            await client.close()
        assert "Paris" in (answer.choices[0].message.content or "")
        async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
            got = await admin.get(
                f"{gw.admin_url}/rollouts/{rollout['rollout_id']}", params={"tokens": 1}
            )
        call = got.json()["calls"][0]
    await engine.close()
    prompt, out = call["prompt_ids"], call["output_ids"]
    with torch.inference_mode():
        logits = engine.model(torch.tensor([prompt + out])).logits[0, len(prompt) - 1 : -1]
    rescored = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(call["output_logprobs"]), rescored, atol=1e-3)


@pytest.mark.slow
async def test_stop_sequences_are_cut_from_the_text_but_kept_in_the_trained_ids(
    tmp_path: Path,
) -> None:
    """OpenAI and Anthropic clients never see a stop string, streaming or not; the recorded
    output still ends with the tokens that completed it, as the engine sampled them."""
    import anthropic

    model_dir = resolve_model("smollm2-135m")
    engine = LocalEngine("smollm2-135m")
    question = [{"role": "user", "content": "What is the capital of France?"}]
    async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=model_dir) as gw:
        async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
            made = await admin.post(gw.admin_url + "/rollouts", json={})
            rollout: dict[str, Any] = made.json()
        oai = openai.AsyncOpenAI(base_url=rollout["openai_base_url"], api_key="unused")
        claude = anthropic.AsyncAnthropic(base_url=rollout["anthropic_base_url"], api_key="unused")
        try:
            free = await oai.chat.completions.create(
                model="m",
                temperature=0,
                max_tokens=30,
                messages=question,  # type: ignore[arg-type]
            )
            full = free.choices[0].message.content or ""
            assert "Paris" in full
            before = full[: full.index("Paris")]
            cut = await oai.chat.completions.create(
                model="m", temperature=0, max_tokens=30, messages=question,  # type: ignore[arg-type]
                stop=["Paris"],
            )  # fmt: skip
            assert cut.choices[0].message.content == before
            assert cut.choices[0].finish_reason == "stop"
            streamed = ""
            stream = await oai.chat.completions.create(
                model="m", temperature=0, max_tokens=30, messages=question,  # type: ignore[arg-type]
                stop=["Paris"], stream=True,
            )  # fmt: skip
            async for chunk in stream:  # type: ignore[union-attr]
                if chunk.choices and chunk.choices[0].delta.content:
                    streamed += chunk.choices[0].delta.content
            assert streamed == before
            async with claude.messages.stream(
                model="m", max_tokens=30, messages=question,  # type: ignore[arg-type]
                stop_sequences=["Paris"], extra_body={"temperature": 0},
            ) as events:  # fmt: skip
                text = "".join([t async for t in events.text_stream])
                final = await events.get_final_message()
            assert text == before
            assert final.stop_reason == "stop_sequence" and final.stop_sequence == "Paris"
        finally:
            await oai.close()
            await claude.close()
        async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
            got = await admin.get(
                f"{gw.admin_url}/rollouts/{rollout['rollout_id']}", params={"tokens": 1}
            )
    await engine.close()
    calls = got.json()["calls"]
    assert [c["finish_reason"] for c in calls] == ["stop"] * 4
    for call in calls[1:]:
        assert "Paris" in engine.tokenizer.decode(call["output_ids"])
