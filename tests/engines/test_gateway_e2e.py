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
        async with httpx.AsyncClient() as admin:
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
        async with httpx.AsyncClient() as admin:
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
