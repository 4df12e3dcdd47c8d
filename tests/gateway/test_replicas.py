"""Gateway replicas on one PostgreSQL store (a real server: tests/conftest.py).

Three ``openforge gateway`` processes serve one rollout's calls in turn through the
openai SDK: the sequence is gapless, every call extends the previous one token-exactly
(each replica that sees the rollout anew rebuilds its history from the store); a pause,
resume or weight version through one replica holds on the others, and a finish through
one replica closes the rollout on all. A replica SIGKILLed while answering loses
no call whose answer a client received, and the rollouts go on through another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import GatewayProcess

from .conftest import MODEL, write_script

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
# One reply, given to every call: each replica's scripted engine counts calls on its own.
SCRIPT = [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}]


@contextlib.asynccontextmanager
async def _replicas(n: int, store: str, tmp_path: Path) -> AsyncIterator[list[GatewayProcess]]:
    script = write_script(tmp_path / "s.jsonl", SCRIPT)
    args = ["--engine", "scripted", "--script", str(script), "--model", MODEL, "--store", store]
    env = {"OPENFORGE_ADMIN_TOKEN": secrets.token_urlsafe(32)}  # one operator, one token
    procs = list(await asyncio.gather(*(GatewayProcess.start(args, env=env) for _ in range(n))))
    try:
        yield procs
    finally:
        await asyncio.gather(*(p.stop() for p in procs))


def _base(proc: GatewayProcess, key: str) -> str:
    return f"{proc.url}/r/{key}/v1"


async def _mint(proc: GatewayProcess) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=proc.admin_headers) as c:
        r = await c.post(proc.admin_url + "/rollouts", json={})
        assert r.status_code == 201, r.text
        return dict(r.json())


async def _recorded(proc: GatewayProcess, rollout_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(headers=proc.admin_headers) as c:
        r = await c.get(f"{proc.admin_url}/rollouts/{rollout_id}", params={"tokens": 1})
        assert r.status_code == 200, r.text
        return list(r.json()["calls"])


async def _turn(client: openai.AsyncOpenAI, msgs: list[Any], stream: bool) -> None:
    """One agent turn: ask, then append the answer and the tool's result to ``msgs``."""
    if stream:
        chunks = await client.chat.completions.create(
            model="m", messages=msgs, tools=TOOLS, stream=True
        )
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in chunks:
            for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.id or ""
                slot["name"] += tc.function.name or "" if tc.function else ""
                slot["arguments"] += tc.function.arguments or "" if tc.function else ""
        tool_calls = [
            {"id": c.pop("id"), "type": "function", "function": c} for c in calls.values()
        ]
        message: dict[str, Any] = {"role": "assistant", "tool_calls": tool_calls}
    else:
        answer = await client.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
        message = answer.choices[0].message.model_dump(exclude_none=True)
    call_id = message["tool_calls"][0]["id"]
    msgs += [message, {"role": "tool", "tool_call_id": call_id, "content": f"out {len(msgs)}"}]


async def _admin(proc: GatewayProcess, path: str, body: dict[str, Any] | None = None) -> None:
    async with httpx.AsyncClient(headers=proc.admin_headers) as c:
        r = await c.post(f"{proc.admin_url}/{path}", json=body or {})
        assert r.status_code == 200, r.text


async def _until(proc: GatewayProcess, field: str, value: object) -> None:
    """Wait until the replica's admin status shows ``field == value`` (an announcement
    travels through the database: milliseconds, bounded here at 10 s)."""
    async with httpx.AsyncClient(headers=proc.admin_headers) as c:
        for _ in range(200):
            status = (await c.get(f"{proc.admin_url}/status")).json()
            if status[field] == value:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{proc.url}: {field} is {status[field]!r}, not {value!r}")


def _extends(first: dict[str, Any], second: dict[str, Any]) -> bool:
    prefix = first["prompt_ids"] + first["output_ids"]
    return bool(second["prompt_ids"][: len(prefix)] == prefix and not second["fork"])


@pytest.mark.slow
async def test_three_replicas_serve_one_rollout_round_robin(
    postgres_url: str, tmp_path: Path
) -> None:
    reply = ScriptedEngine.for_model(write_script(tmp_path / "r.jsonl", SCRIPT), MODEL)
    async with _replicas(3, postgres_url, tmp_path) as procs:
        minted = await _mint(procs[0])
        msgs: list[Any] = [{"role": "user", "content": "List the files, nine times."}]
        for i in range(9):
            proc = procs[i % 3]
            async with openai.AsyncOpenAI(base_url=_base(proc, minted["key"]), api_key="x") as c:
                await _turn(c, msgs, stream=i % 2 == 1)
        # A pause through one replica holds new calls on the others; a resume through a
        # third lets them go; a weight version set through one stamps the others' calls.
        await _admin(procs[0], "pause?wait=0")
        await _until(procs[2], "paused", True)
        async with openai.AsyncOpenAI(base_url=_base(procs[2], minted["key"]), api_key="x") as c:
            held = asyncio.create_task(_turn(c, msgs, stream=True))
            await asyncio.sleep(0.5)
            assert not held.done()
            await _admin(procs[1], "resume")
            await asyncio.wait_for(held, 30)
        await _admin(procs[0], "weights", {"version": "7"})
        await _until(procs[1], "weight_version", "7")
        async with openai.AsyncOpenAI(base_url=_base(procs[1], minted["key"]), api_key="x") as c:
            await _turn(c, msgs, stream=False)
        calls = await _recorded(procs[2], minted["rollout_id"])
        # A finish through one replica holds on the others at once.
        async with httpx.AsyncClient(headers=procs[1].admin_headers) as c:
            r = await c.post(
                f"{procs[1].admin_url}/rollouts/{minted['rollout_id']}/finish",
                json={"status": "completed", "reward": 1.0},
            )
            assert r.status_code == 200, r.text
        for proc in (procs[0], procs[2]):
            async with openai.AsyncOpenAI(base_url=_base(proc, minted["key"]), api_key="x") as c:
                with pytest.raises(openai.PermissionDeniedError):
                    await c.chat.completions.create(model="m", messages=msgs, tools=TOOLS)
    assert [c["seq"] for c in calls] == list(range(11))
    assert [c["weight_version"] for c in calls] == ["0"] * 10 + ["7"]
    assert all(c["status"] == "ok" for c in calls)
    assert all(c["output_ids"] == reply.reply_ids(0) for c in calls)  # what the engine sampled
    for before, after in itertools.pairwise(calls):
        assert _extends(before, after), after["render_info"]
        # From the rebuilt history's ids, not re-tokenized text.
        assert after["render_info"]["reused_tokens"] >= len(before["prompt_ids"])


async def _agent(base: str, key: str, answered: list[int], stop: asyncio.Event) -> list[Any]:
    """Call in a loop until ``stop``; ``answered`` counts answers received in full."""
    msgs: list[Any] = [{"role": "user", "content": "Keep listing the files."}]
    async with openai.AsyncOpenAI(base_url=f"{base}/r/{key}/v1", api_key="x", max_retries=0) as c:
        while not stop.is_set():
            try:
                await _turn(c, msgs, stream=True)
            except openai.APIError:
                return msgs  # the replica went away mid-call: this answer never arrived
            answered[0] += 1
    return msgs


@pytest.mark.slow
async def test_a_replica_killed_mid_stream_loses_no_answered_call(
    postgres_url: str, tmp_path: Path
) -> None:
    async with _replicas(2, postgres_url, tmp_path) as (doomed, survivor):
        minted = [await _mint(survivor) for _ in range(12)]
        counts = [[0] for _ in minted]
        stop = asyncio.Event()
        agents = [
            asyncio.create_task(_agent(doomed.url, m["key"], n, stop))
            for m, n in zip(minted, counts, strict=True)
        ]
        while sum(n[0] for n in counts) < 60:  # well into the run, many calls mid-stream
            assert not any(a.done() for a in agents), "an agent stopped before the kill"
            await asyncio.sleep(0.01)
        await doomed.stop(signal.SIGKILL)
        stop.set()
        histories = await asyncio.gather(*agents)
        answered = [n[0] for n in counts]
        recorded = [await _recorded(survivor, m["rollout_id"]) for m in minted]
        # Every rollout goes on through the survivor, after what was recorded.
        for m, msgs in zip(minted, histories, strict=True):
            async with openai.AsyncOpenAI(base_url=_base(survivor, m["key"]), api_key="x") as c:
                await _turn(c, msgs[: 1 + 2 * answered[minted.index(m)]], stream=False)
        after = [await _recorded(survivor, m["rollout_id"]) for m in minted]
    for n, calls in zip(answered, recorded, strict=True):
        ok = [c["seq"] for c in calls if c["status"] == "ok"]
        assert ok[:n] == list(range(n)), (n, ok)  # every answered call, in order
    for before, calls in zip(recorded, after, strict=True):
        assert len(calls) == len(before) + 1 and calls[-1]["status"] == "ok"
        assert calls[-1]["seq"] > before[-1]["seq"] if before else calls[-1]["seq"] == 0
