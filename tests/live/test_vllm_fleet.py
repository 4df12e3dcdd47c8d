"""Two gateways on one PostgreSQL store in front of the live vLLM, and a LoRA adapter
loaded through one of them (``POST /admin/weights {"version", "path", "adapter"}``).

The update comes through gateway A while a call runs on gateway B: B drains it first
(base weights, version 0), a call sent to B meanwhile waits and is answered by the
adapter (B sends the policy's calls to it by name, though A loaded it) as version 1, and
A's next call gets the same answer. After the adapter the greedy answer is another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.engines.registry import create_engine
from openforge.gateway.server import Gateway
from openforge.store.location import open_store

from .test_vllm_gateway import QUESTION, new_rollout, recorded_calls
from .test_vllm_lora import make_adapter
from .test_vllm_weights import COUNT, chat, status
from .vllm_server import SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)


def _gateway(server: VLLMServer, model: Path, store: str) -> Gateway:
    engine = create_engine("vllm", urls=[server.url], model=str(model), served_model=SERVED)
    return Gateway(engine, open_store(store), model=model)


async def _until_paused(gw: Gateway) -> None:
    while not (await status(gw))["paused"]:
        await asyncio.sleep(0.05)


async def test_an_adapter_loaded_through_one_gateway_drains_and_serves_both(
    live_vllm: VLLMServer, smollm2: Path, postgres_url: str, tmp_path: Path
) -> None:
    adapter = make_adapter(smollm2, tmp_path / "adapter", 1)
    load = {"version": "1", "path": str(adapter), "adapter": "policy"}
    async with (
        _gateway(live_vllm, smollm2, postgres_url) as a,
        _gateway(live_vllm, smollm2, postgres_url) as b,
        httpx.AsyncClient(timeout=300) as client,
        httpx.AsyncClient(headers=a.admin_headers, timeout=300) as admin,
    ):
        rollout = await new_rollout(a)
        on_a = rollout["openai_base_url"] + "/chat/completions"
        on_b = on_a.replace(a.url, b.url)
        try:
            before = await chat(client, on_b, QUESTION, 24)
            counted = await chat(client, on_b, COUNT, 40)
            in_flight = asyncio.create_task(chat(client, on_b, COUNT, 40))
            while (await status(b))["in_flight"] == 0:
                await asyncio.sleep(0.05)
            update = asyncio.create_task(admin.post(a.admin_url + "/weights", json=load))
            await _until_paused(b)
            held = asyncio.create_task(chat(client, on_b, QUESTION, 24))
            answered = await update
            assert answered.status_code == 200, answered.text
            assert in_flight.done() and await in_flight == counted
            adapted = await held
            again = await chat(client, on_a, QUESTION, 24)
            states: list[dict[str, Any]] = [await status(gw) for gw in (a, b)]
        finally:
            await client.post(
                live_vllm.url + "/v1/unload_lora_adapter", json={"lora_name": "policy"}
            )
        calls = await recorded_calls(a, rollout["rollout_id"])
    assert adapted != before and again == adapted
    assert [(c["weight_version"], c["status"]) for c in calls] == [("0", "ok")] * 3 + [
        ("1", "ok")
    ] * 2
    assert not any("weight_version_at_end" in c["render_info"] for c in calls)
    for state in states:
        assert state["weight_version"] == "1" and state["paused"] is False
        assert state["engine"]["model"] == "policy" and state["engine"]["weight_version"] == "1"
