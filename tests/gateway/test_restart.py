"""Restart safety: a gateway SIGKILLed mid-rollout and started again on the same store.

The next call of a live rollout must extend the previous call's prompt + output exactly
(no fork), and a Responses ``previous_response_id`` answered before the restart must
still resolve.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from openforge.gateway.server import GatewayProcess

from .conftest import MODEL, TOOL_SCRIPT, write_script

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "bash", "parameters": TOOLS[0]["function"]["parameters"]}
]


async def _calls(admin_url: str, rollout_id: str, token: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as c:
        r = await c.get(f"{admin_url}/rollouts/{rollout_id}", params={"tokens": 1})
        assert r.status_code == 200, r.text
        return list(r.json()["calls"])


def _extends(first: dict[str, Any], second: dict[str, Any]) -> bool:
    prefix = first["prompt_ids"] + first["output_ids"]
    return bool(second["prompt_ids"][: len(prefix)] == prefix and not second["fork"])


@pytest.mark.slow
async def test_rollouts_continue_token_exactly_after_a_restart(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", TOOL_SCRIPT)
    args = ["--engine", "scripted", "--script", str(script), "--model", MODEL]
    args += ["--store", str(tmp_path / "store.db")]
    proc = await GatewayProcess.start(args)
    try:
        async with httpx.AsyncClient(headers=proc.admin_headers) as c:
            chat = (await c.post(proc.admin_url + "/rollouts", json={})).json()
            resp = (await c.post(proc.admin_url + "/rollouts", json={})).json()
        async with openai.AsyncOpenAI(base_url=chat["openai_base_url"], api_key="x") as client:
            msgs: list[Any] = [{"role": "user", "content": "Run echo hi."}]
            first = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        async with openai.AsyncOpenAI(base_url=resp["openai_base_url"], api_key="x") as rclient:
            r1 = await rclient.responses.create(
                model="m", input="Run echo hi.", tools=RESPONSES_TOOLS, store=True
            )
    finally:
        await proc.stop(signal.SIGKILL)  # no graceful shutdown: memory is simply gone

    port = int(proc.url.rsplit(":", 1)[1])
    proc = await GatewayProcess.start(args, port=port)  # the harness keeps its base URL
    try:
        tc = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        msgs += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tc.id, "content": "hi"},
        ]
        async with openai.AsyncOpenAI(base_url=chat["openai_base_url"], api_key="x") as client:
            await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS, stream=True)
        fc = next(item for item in r1.output if item.type == "function_call")
        async with openai.AsyncOpenAI(base_url=resp["openai_base_url"], api_key="x") as rclient:
            r2 = await rclient.responses.create(
                model="m",
                previous_response_id=r1.id,
                input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "hi"}],
                tools=RESPONSES_TOOLS,
            )
        assert r2.status == "completed"
        chat_calls = await _calls(proc.admin_url, chat["rollout_id"], proc.admin_token)
        resp_calls = await _calls(proc.admin_url, resp["rollout_id"], proc.admin_token)
    finally:
        await proc.stop()
    assert [c["seq"] for c in chat_calls] == [0, 1]
    assert _extends(chat_calls[0], chat_calls[1]), chat_calls[1]["render_info"]
    # Everything up to the new tool result came from restored ids, not re-tokenized text.
    assert chat_calls[1]["render_info"]["reused_tokens"] >= len(chat_calls[0]["prompt_ids"])
    assert [c["seq"] for c in resp_calls] == [0, 1]
    assert _extends(resp_calls[0], resp_calls[1]), resp_calls[1]["render_info"]
