"""The gateway through the vLLM engine client, as `openforge gateway --engine vllm` runs it,
against the vLLM-shaped server: a JSON call is answered whole, a streamed one streams, and
both record the same ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from openforge.engines.vllm import VLLMEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore

from .fake_servers import FakeState, Served, fake_logprob, vllm_app

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


async def test_json_calls_are_answered_whole_and_streamed_calls_stream(tmp_path: Path) -> None:
    state = FakeState()
    async with Served(vllm_app(state)) as served:
        engine = VLLMEngine(served.url, model="m", context_length=4096)
        store = SqliteStore(tmp_path / "store.db")
        gateway = Gateway(engine, store, model=resolve_model("smollm2-135m"))
        async with gateway as gw, httpx.AsyncClient(timeout=30) as client:
            admin = {"headers": gw.admin_headers}
            made = await client.post(gw.admin_url + "/rollouts", json={}, **admin)
            rollout: dict[str, Any] = made.json()
            url = rollout["openai_base_url"] + "/chat/completions"
            body = {"model": "m", "messages": MESSAGES, "max_tokens": 5}
            whole = await client.post(url, json=body)
            streamed = await client.post(url, json={**body, "stream": True})
            got = await client.get(
                f"{gw.admin_url}/rollouts/{rollout['rollout_id']}",
                params={"tokens": 1},
                **admin,
            )
        await engine.close()
    assert whole.status_code == 200, whole.text
    assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
    assert [r["stream"] for r in state.requests] == [False, True]
    calls = got.json()["calls"]
    assert [c["status"] for c in calls] == ["ok", "ok"]
    # The same prompt, so the same arithmetic answer either way, and its logprobs.
    assert calls[0]["prompt_ids"] == calls[1]["prompt_ids"]
    assert calls[0]["output_ids"] == calls[1]["output_ids"] and len(calls[0]["output_ids"]) == 5
    got_logprobs = calls[0]["output_logprobs"]
    assert got_logprobs == calls[1]["output_logprobs"]
    assert all(
        abs(a - fake_logprob(t)) < 1e-6
        for a, t in zip(got_logprobs, calls[0]["output_ids"], strict=True)
    )
    text = whole.json()["choices"][0]["message"]["content"]
    events = [orjson.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    deltas = [e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]]
    assert text and "".join(deltas) == text and len(deltas) > 2
    # A whole answer's arrival is not its first token's: not recorded as one.
    assert calls[0]["first_token_s"] is None and calls[1]["first_token_s"] is not None
