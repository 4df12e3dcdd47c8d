"""Durability under SIGKILL, client disconnects, pause/resume and weight stamps."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.gateway.server import GatewayProcess
from openforge.store.sqlite import SqliteStore

from .conftest import MODEL, TOOL_SCRIPT, new_rollout, rollout_calls, write_script

CHAT = {"model": "m", "messages": [{"role": "user", "content": "go"}]}


@pytest.mark.slow
async def test_answered_calls_survive_sigkill(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.jsonl", TOOL_SCRIPT)
    store_path = tmp_path / "store.db"
    proc = await GatewayProcess.start(
        [
            "--engine",
            "scripted",
            "--script",
            str(script),
            "--model",
            MODEL,
            "--store",
            str(store_path),
        ]
    )
    try:
        async with httpx.AsyncClient(headers=proc.admin_headers) as c:
            r = (await c.post(proc.admin_url + "/rollouts", json={})).json()
            url = r["openai_base_url"] + "/chat/completions"
            bodies = await asyncio.gather(
                *(c.post(url, json={**CHAT, "stream": i % 2 == 1}) for i in range(16))
            )
            assert all(b.status_code == 200 for b in bodies)
    finally:
        await proc.stop(signal.SIGKILL)  # right after the last answer: no graceful shutdown
    store = SqliteStore(store_path)
    calls = await store.calls(r["rollout_id"])
    await store.close()
    assert sorted(c.seq for c in calls) == list(range(16))
    assert all(c.status == "ok" and c.output_ids for c in calls)


@pytest.mark.slow
async def test_a_gateway_child_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A training run SIGKILLed (an OOM kill) must not leave its gateway child behind."""
    script = write_script(tmp_path / "s.jsonl", TOOL_SCRIPT)
    pid_file = tmp_path / "gateway.pid"
    parent = (
        "import asyncio, pathlib\n"
        "from openforge.gateway.server import GatewayProcess\n"
        "async def main():\n"
        f"    p = await GatewayProcess.start(['--engine', 'scripted', '--script', {str(script)!r},"
        f" '--model', {MODEL!r}, '--store', {str(tmp_path / 'store.db')!r}])\n"
        f"    pathlib.Path({str(pid_file)!r}).write_text(str(p.proc.pid))\n"
        "    await asyncio.sleep(600)\n"
        "asyncio.run(main())\n"
    )
    # No pipes: the gateway would inherit them, and asyncio waits for every pipe to close.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", parent, stdout=asyncio.subprocess.DEVNULL
    )
    for _ in range(1200):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.1)
    gateway = int(pid_file.read_text())
    proc.kill()
    await proc.wait()
    for _ in range(200):  # its graceful stop takes a moment
        if not Path(f"/proc/{gateway}").exists() or _zombie(gateway):
            break
        await asyncio.sleep(0.1)
    else:
        os.kill(gateway, signal.SIGKILL)
        pytest.fail("the gateway outlived the process that started it")


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    return True


async def test_client_disconnect_aborts_the_call(make_gateway: Any) -> None:
    async with make_gateway([{"text": "word " * 400}], delay_s=0.01) as gw:
        r = await new_rollout(gw)
        async with httpx.AsyncClient() as c:
            url = r["openai_base_url"] + "/chat/completions"
            async with c.stream("POST", url, json={**CHAT, "stream": True}) as resp:
                async for _ in resp.aiter_bytes():
                    break  # one chunk, then hang up
        for _ in range(500):  # wait for the gateway to notice and record
            calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
            if calls:
                break
            await asyncio.sleep(0.01)
        assert calls[0]["status"] == "client_aborted"
        assert calls[0]["finish_reason"] == "abort"
        assert 0 < calls[0]["output_tokens"] < 400
        assert gw.apps.control.in_flight == 0


async def test_a_client_gone_before_the_first_token(make_gateway: Any) -> None:
    # The engine takes 0.3 s to its first token; the client hangs up after 0.1 s, while
    # the gateway waits on the engine request it sent before preparing the record.
    async with make_gateway([{"text": "word " * 20}], delay_s=0.3) as gw:
        r = await new_rollout(gw)
        async with httpx.AsyncClient(timeout=0.1) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.post(r["openai_base_url"] + "/chat/completions", json=CHAT)
        for _ in range(500):
            calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
            if calls:
                break
            await asyncio.sleep(0.01)
        assert calls[0]["status"] == "client_aborted"
        assert calls[0]["output_tokens"] == 0 and calls[0]["prompt_tokens"] > 0
        assert gw.apps.control.in_flight == 0
        # The rollout goes on: the next call is answered and recorded after it.
        async with httpx.AsyncClient(timeout=30) as c:
            ok = await c.post(r["openai_base_url"] + "/chat/completions", json=CHAT)
        assert ok.status_code == 200
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        assert [c["status"] for c in calls] == ["client_aborted", "ok"]


async def test_the_record_uses_the_columns_prepared_during_generation(tmp_path: Path) -> None:
    """Every answered call reaches the store with its request columns already computed
    (while the engine generated), and they fit the call as recorded."""
    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.server import Gateway
    from openforge.store.rows import RequestColumns
    from openforge.store.schemas import CallRecord

    fitted: list[bool] = []

    class Watched(SqliteStore):
        async def record_call(
            self, call: CallRecord, request: RequestColumns | None = None
        ) -> None:
            fitted.append(request is not None and request.fits(call))
            await super().record_call(call, request)

    script = write_script(tmp_path / "s.jsonl", TOOL_SCRIPT)
    engine = ScriptedEngine.for_model(script, MODEL)
    async with Gateway(engine, Watched(tmp_path / "store.db"), model=MODEL) as gw:
        r = await new_rollout(gw)
        url = r["openai_base_url"] + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as c:
            for stream in (False, True):
                assert (await c.post(url, json={**CHAT, "stream": stream})).status_code == 200
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
    assert fitted == [True, True] and [c["status"] for c in calls] == ["ok", "ok"]


async def test_pause_holds_calls_and_weights_stamp(make_gateway: Any) -> None:
    async with make_gateway() as gw, httpx.AsyncClient(headers=gw.admin_headers) as c:
        r = await new_rollout(gw)
        url = r["openai_base_url"] + "/chat/completions"
        paused = (await c.post(gw.admin_url + "/pause")).json()
        assert paused["paused"] is True and paused["in_flight"] == 0
        held = asyncio.create_task(c.post(url, json=CHAT))
        await asyncio.sleep(0.2)
        assert not held.done()  # held at the gate, not refused
        stamped = await c.post(gw.admin_url + "/weights", json={"version": "7", "path": "/ckpt"})
        assert stamped.json() == {"paused": True, "in_flight": 0, "weight_version": "7"}
        await c.post(gw.admin_url + "/resume")
        assert (await held).status_code == 200
        calls = (await rollout_calls(gw, r["rollout_id"]))["calls"]
        assert calls[0]["weight_version"] == "7"
        assert gw.engine.info().weight_version == "7"  # the engine was told to load it


async def test_an_adapter_needs_its_path_and_an_engine_that_loads_adapters(
    make_gateway: Any,
) -> None:
    async with make_gateway() as gw, httpx.AsyncClient(headers=gw.admin_headers) as c:
        bodies = [
            {"version": "1", "adapter": "policy"},
            {"version": "1", "path": "/ckpt", "adapter": "policy"},
            {"version": "1", "path": "/ckpt", "adapter": ""},
        ]
        answers = [await c.post(gw.admin_url + "/weights", json=b) for b in bodies]
        state = (await c.get(gw.admin_url + "/status")).json()
    assert [a.status_code for a in answers] == [400, 400, 400]
    messages = [a.json()["error"]["message"] for a in answers]
    assert messages == [
        "'adapter' needs the adapter's 'path'",
        "the scripted engine cannot load LoRA adapters",
        "'adapter' must name the adapter",
    ]
    assert state["paused"] is False and state["weight_version"] == "0"  # nothing changed


async def test_admin_token(make_gateway: Any) -> None:
    async with make_gateway(admin_token="s3cret") as gw, httpx.AsyncClient() as c:
        assert (await c.post(gw.admin_url + "/rollouts", json={})).status_code == 401
        ok = await c.post(
            gw.admin_url + "/rollouts", json={}, headers={"authorization": "Bearer s3cret"}
        )
        assert ok.status_code == 201
        bad = await c.post(
            gw.admin_url + f"/rollouts/{ok.json()['rollout_id']}/finish",
            json={"status": "nope"},
            headers={"authorization": "Bearer s3cret"},
        )
        assert bad.status_code == 400 and "status" in bad.json()["error"]["message"]
