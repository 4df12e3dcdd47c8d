"""The admin API's side of the reward-hack monitor: a rollout's calls with their content,
and its flags recorded (after the finish), read back and refused when malformed."""

from __future__ import annotations

import httpx

from openforge.gateway.server import Gateway

from .conftest import new_rollout

CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
FLAG = {
    "rule": "verifier-files",
    "severity": "high",
    "where": "call 0",
    "evidence": "bash: echo hi",
}


async def test_calls_with_content_and_flags_after_the_finish(gateway: Gateway) -> None:
    r = await new_rollout(gateway, task_id="t")
    url = f"{gateway.admin_url}/rollouts/{r['rollout_id']}"
    async with httpx.AsyncClient(headers=gateway.admin_headers) as c:
        answer = await c.post(r["openai_base_url"] + "/chat/completions", json=CHAT)
        assert answer.status_code == 200
        plain = (await c.get(url)).json()
        assert "completion" not in plain["calls"][0] and plain["flags"] == []
        (call,) = (await c.get(url, params={"content": 1})).json()["calls"]
        assert call["completion"]["tool_calls"][0]["name"] == "bash"
        assert call["conversation"]["messages"][0]["content"][0]["text"] == "go"
        finish = await c.post(url + "/finish", json={"status": "completed", "reward": 0.0})
        assert finish.status_code == 200
        got = await c.post(url + "/flags", json={"flags": [FLAG]})
        assert got.status_code == 200, got.text
        assert got.json()["flags"] == [FLAG] and got.json()["reward"] == 0.0
        assert (await c.get(url)).json()["flags"] == [FLAG]
        assert (await c.post(url + "/flags", json={"flags": []})).json()["flags"] == []
        for body, says in (
            ({}, "'flags' must be a list"),
            ({"flags": [{"rule": "x"}]}, "'flags[0]' must be an object with string rule"),
            ({"flags": [{**FLAG, "severity": "fatal"}]}, "'flags[0]': 'fatal' is not a valid"),
        ):
            bad = await c.post(url + "/flags", json=body)
            assert bad.status_code == 400 and says in bad.json()["error"]["message"], bad.text
        missing = await c.post(f"{gateway.admin_url}/rollouts/ro_none/flags", json={"flags": []})
        assert missing.status_code == 404
    async with httpx.AsyncClient() as anonymous:
        refused = await anonymous.post(url + "/flags", json={"flags": []})
        assert refused.status_code == 401
