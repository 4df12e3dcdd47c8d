"""The trainer's weights back into the live vLLM server through the gateway: a GRPO step,
exported and pushed (``WeightSync`` → ``POST /admin/weights`` → pause and drain, vLLM's
``reload_weights`` over ``/collective_rpc``, prefix-cache reset, resume). After it the
server's greedy answer changes, vLLM's logprobs are the updated trainer's own, and every
call is stamped with the version whose weights produced it: a call in flight when the
sync starts finishes on the old weights as version 0, one sent during it waits and runs on
the new ones as version 1. Reloading the original checkpoint restores the exact tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.traces.samples import Mode, TraceOptions
from openforge.traces.source import open_store, plan_rollouts
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer
from openforge.training.weight_sync import WeightSync

from .test_vllm_engine import COUNTING, vllm_answer
from .test_vllm_gateway import QUESTION, gateway, new_rollout, recorded_calls
from .vllm_server import VLLMServer

pytestmark = pytest.mark.timeout(900)

COUNT = [{"role": "user", "content": f"Continue counting: {COUNTING}"}]


async def chat(client: httpx.AsyncClient, url: str, messages: list[dict[str, str]], n: int) -> str:
    """A greedy chat answer of at most ``n`` tokens through the gateway."""
    got = await client.post(
        url, json={"model": "m", "messages": messages, "max_tokens": n, "temperature": 0}
    )
    assert got.status_code == 200, got.text
    text: str = got.json()["choices"][0]["message"]["content"]
    return text


async def status(gw: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
        got: dict[str, Any] = (await admin.get(gw.admin_url + "/status")).json()
    return got


async def test_a_weight_sync_changes_the_live_server_and_stamps_every_later_call(
    live_vllm: VLLMServer, smollm2: Path, tool_model: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    async with gateway(live_vllm, smollm2, store) as gw:
        rollout = await new_rollout(gw)
        url = rollout["openai_base_url"] + "/chat/completions"
        sync = WeightSync(gw.control_url, tmp_path / "weights", gw.admin_token)
        async with httpx.AsyncClient(timeout=300) as client:
            before = await chat(client, url, QUESTION, 24)
            counted = await chat(client, url, COUNT, 40)
            calls = await recorded_calls(gw, rollout["rollout_id"])
            # One GRPO step pushing the greedy answer down (AdamW's first step moves every
            # trained weight by about the learning rate). The top layers only: vLLM 0.32 on
            # CPU keeps the LM head it packed at start-up when a tied embedding is reloaded
            # (docs/engines.md, "Confirmed live"), so a changed embedding would not reach
            # its logits.
            source = open_store(store)
            try:
                opts = TraceOptions(mode=Mode.PER_CALL, include_running=True)
                (plan,) = await plan_rollouts(source, [rollout["rollout_id"]], opts)
            finally:
                await source.close()
            config = TrainConfig(
                model=str(smollm2), dtype="float32", learning_rate=1e-3, train_layers=8
            )
            trainer = Trainer(config, smollm2, device="cpu")
            step = trainer.train_step(plan.samples[:1], {rollout["rollout_id"]: -1.0})
            assert step.accepted
            try:
                # A call in flight when the sync starts, and one sent while it runs.
                in_flight = asyncio.create_task(chat(client, url, COUNT, 40))
                while (await status(gw))["in_flight"] == 0:
                    await asyncio.sleep(0.05)
                pushed = asyncio.create_task(sync.push(trainer, 1))
                while not (await status(gw))["paused"]:
                    await asyncio.sleep(0.05)
                held = asyncio.create_task(chat(client, url, QUESTION, 24))
                result = await pushed
                assert await in_flight == counted
                after = await held
                again = await chat(client, url, QUESTION, 24)
                calls = await recorded_calls(gw, rollout["rollout_id"])
                direct = await vllm_answer(
                    live_vllm,
                    {"prompt": calls[-1]["prompt_ids"], "max_tokens": 24, "temperature": 0,
                     "logprobs": 0, "return_token_ids": True},
                )  # fmt: skip
            finally:
                # The original weights back (from the served directory), as version 2.
                await sync.load("2", tool_model)
            restored = await chat(client, url, QUESTION, 24)
        info = (await status(gw))["engine"]
        await sync.close()
        final = await recorded_calls(gw, rollout["rollout_id"])
    assert result.version == "1" and result.path.is_dir()
    assert after != before and again == after  # the new weights, and greedy still repeats
    assert restored == before
    versions = [(c["weight_version"], c["status"]) for c in final]
    assert versions == [("0", "ok")] * 3 + [("1", "ok")] * 2 + [("2", "ok")]
    assert info["weight_version"] == "2"
    # vLLM's own answer is the new one, and its logprobs are the updated trainer's.
    assert direct["token_ids"] == calls[-1]["output_ids"]
    new_call = calls[-1]
    assert direct["logprobs"]["token_logprobs"] == new_call["output_logprobs"]
    source = open_store(store)
    try:
        (plan,) = await plan_rollouts(source, [rollout["rollout_id"]], opts)
    finally:
        await source.close()
    sample = next(s for s in plan.samples if s.response_ids == new_call["output_ids"])
    (recomputed,) = trainer.token_logprobs([sample])
    trained = [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m]
    assert max(abs(a - b) for a, b in zip(trained, recomputed, strict=True)) < 1e-3
