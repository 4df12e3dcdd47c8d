"""A very small training session through the live vLLM server, run as ``openforge
quickstart --engine vllm --engine-url URL`` runs one (the quickstart's settings cut down to
one claw-drill skill): the gateway child in front of vLLM, the claw agent's rollouts in
local sandboxes, the SFT warm-up and a GRPO step, each accepted update exported and pushed.

The server itself shows the sync: its log gains ``/pause``, ``/collective_rpc``,
``/reset_prefix_cache`` and ``/resume`` once per push, its greedy answer to a recorded
prompt is another after the session than on the original weights, and the store stamps
the calls before the first push 0 and the last ones with the run's final version."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.models.registry import resolve_model
from openforge.store.schemas import CallStatus
from openforge.traces.source import open_store
from openforge.training.loop import run_loop
from openforge.training.quickstart import quickstart_config, teacher_tasks
from openforge.training.session import open_session
from openforge.training.teacher import sft_warmup, teacher_samples

from .vllm_server import SERVED, VLLMServer

pytestmark = pytest.mark.timeout(900)

SYNC_ROUTES = ("/pause", "/collective_rpc", "/reset_prefix_cache", "/resume")


def served_routes(server: VLLMServer) -> dict[str, int]:
    """How often the server's access log shows each weight-sync route asked."""
    log = server.log_path.read_text(errors="replace")
    return {r: log.count(f'"POST {r}') for r in SYNC_ROUTES}


async def greedy(server: VLLMServer, prompt_ids: list[int]) -> list[int]:
    """vLLM's own greedy answer (16 tokens) to ``prompt_ids``."""
    async with httpx.AsyncClient(timeout=300) as client:
        got = await client.post(
            server.url + "/v1/completions",
            json={"model": SERVED, "prompt": prompt_ids, "max_tokens": 16, "temperature": 0,
                  "return_token_ids": True},
        )  # fmt: skip
    assert got.status_code == 200, got.text
    ids: list[int] = got.json()["choices"][0]["token_ids"]
    return ids


async def reload_original(server: VLLMServer, model_dir: Path) -> None:
    """The served directory's weights back, as a weight sync loads them (the other tests of
    this package share the server)."""
    async with httpx.AsyncClient(base_url=server.url, timeout=300) as client:
        await client.post("/pause", params={"mode": "wait"})
        try:
            got = await client.post(
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": str(model_dir)}},
            )
            assert got.status_code == 200, got.text
            await client.post("/reset_prefix_cache")
        finally:
            await client.post("/resume")


async def test_a_small_training_session_syncs_its_weights_into_the_live_server(
    live_vllm: VLLMServer, tool_model: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    cfg = dataclasses.replace(
        quickstart_config(str(run_dir), steps=1),
        engine="vllm",
        engine_urls=[live_vllm.url],
        served_model=SERVED,
        task_ids=["drill-append-line-*"],  # 6 train, 2 test instances
        sft_epochs=1,
        tasks_per_step=1,
        group_size=2,
    )
    routes_before = served_routes(live_vllm)
    try:
        async with open_session(cfg) as env:
            samples = await teacher_samples(
                cfg, teacher_tasks(env.train_tasks), resolve_model(cfg.model)
            )
            assert samples
            summary = await run_loop(cfg, env, warmup=sft_warmup(samples))
        store = open_store(run_dir / "store.db")
        try:
            calls = [c for r in await store.rollouts() for c in await store.calls(r.id)]
        finally:
            await store.close()
        probe = next(c for c in calls if c.status is CallStatus.OK).prompt_ids
        trained = await greedy(live_vllm, probe)
        routes_after = served_routes(live_vllm)
    finally:
        await reload_original(live_vllm, tool_model)
    original = await greedy(live_vllm, probe)

    pushes = [m for m in _metrics(run_dir) if m.get("kind") == "train"]
    synced = 1 + len(pushes)  # the warm-up's push, and each GRPO step that updated
    assert {r: routes_after[r] - routes_before[r] for r in SYNC_ROUTES} == dict.fromkeys(
        SYNC_ROUTES, synced
    )
    assert trained != original
    policy = sorted(calls, key=lambda c: c.created_at)
    assert policy[0].weight_version == "0"  # the evaluation before training
    assert policy[-1].weight_version == str(summary.version) != "0"
    assert summary.steps_done == 1


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
