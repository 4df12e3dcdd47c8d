"""Rollouts are isolated: stored responses resolve only within the caller's rollout, ids are
unguessable, and a finish drains the rollout's calls so none lands in its samples later."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import openai
import pytest

from openforge.dialects.openai_responses import StoredResponses

from .conftest import new_rollout, rollout_calls

TEXT = [{"text": "first answer"}, {"text": "second answer"}]


async def test_previous_response_id_of_another_rollout_is_not_found(make_gateway: Any) -> None:
    async with make_gateway(TEXT * 3) as gw:
        a, b = await new_rollout(gw), await new_rollout(gw)
        async with (
            openai.AsyncOpenAI(base_url=a["openai_base_url"], api_key="x") as ca,
            openai.AsyncOpenAI(base_url=b["openai_base_url"], api_key="x") as cb,
        ):
            ra = await ca.responses.create(model="m", input="secret of A", store=True)
            assert re.fullmatch(r"resp_[0-9a-f]{32}", ra.id)  # 128 random bits
            with pytest.raises(openai.NotFoundError) as caught:
                await cb.responses.create(model="m", input="leak?", previous_response_id=ra.id)
            assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]
            # Within its own rollout the id still resolves.
            again = await ca.responses.create(model="m", input="go on", previous_response_id=ra.id)
            assert again.status == "completed"
        calls_b = (await rollout_calls(gw, b["rollout_id"]))["calls"]
        assert [c["status"] for c in calls_b] == ["rejected"]
        # A's text never reached B's recorded prompt.
        assert "secret of A" not in str(calls_b)


async def test_previous_response_id_of_another_rollout_after_eviction_uses_the_store(
    make_gateway: Any,
) -> None:
    async with make_gateway(TEXT * 3) as gw:
        a, b = await new_rollout(gw), await new_rollout(gw)
        async with openai.AsyncOpenAI(base_url=a["openai_base_url"], api_key="x") as ca:
            ra = await ca.responses.create(model="m", input="secret of A", store=True)
        for served in gw.apps.service.dialects:  # forget what is in memory: the store answers
            if isinstance(served.memory, StoredResponses):
                served.memory._recent.clear()
        async with (
            openai.AsyncOpenAI(base_url=a["openai_base_url"], api_key="x") as ca,
            openai.AsyncOpenAI(base_url=b["openai_base_url"], api_key="x") as cb,
        ):
            with pytest.raises(openai.NotFoundError):
                await cb.responses.create(model="m", input="leak?", previous_response_id=ra.id)
            ok = await ca.responses.create(model="m", input="on", previous_response_id=ra.id)
            assert ok.status == "completed"


async def test_a_call_held_past_the_finish_is_refused_not_recorded_as_a_sample(
    make_gateway: Any,
) -> None:
    async with make_gateway(TEXT * 2) as gw, httpx.AsyncClient(headers=gw.admin_headers) as c:
        r = await new_rollout(gw)
        await c.post(gw.admin_url + "/pause")
        client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
        held = asyncio.create_task(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        )
        await asyncio.sleep(0.3)  # admitted past authorisation, waiting at the gate
        done = await c.post(
            f"{gw.admin_url}/rollouts/{r['rollout_id']}/finish",
            json={"status": "completed", "reward": 1.0},
        )
        assert done.status_code == 200
        await c.post(gw.admin_url + "/resume")
        with pytest.raises(openai.PermissionDeniedError):
            await held
        await client.close()
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        assert [c["status"] for c in calls] == ["rejected"]


async def test_a_call_still_running_after_the_drain_is_recorded_late(make_gateway: Any) -> None:
    slow = [{"text": "one two three four five six seven eight nine ten " * 4}]
    async with (
        make_gateway(slow, delay_s=0.05, finish_drain_s=0.2) as gw,
        httpx.AsyncClient(headers=gw.admin_headers) as c,
    ):
        r = await new_rollout(gw)
        client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
        running = asyncio.create_task(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        )
        await asyncio.sleep(0.3)  # generating, one token per 50 ms
        t0 = asyncio.get_running_loop().time()
        done = await c.post(
            f"{gw.admin_url}/rollouts/{r['rollout_id']}/finish",
            json={"status": "completed", "reward": 1.0},
        )
        waited = asyncio.get_running_loop().time() - t0
        assert done.status_code == 200 and waited >= 0.2  # the bounded drain ran
        answer = await running  # the client still gets its answer
        assert answer.choices[0].message.content
        await client.close()
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        assert [c["status"] for c in calls] == ["late"]
