"""A weight update through one of several gateway processes on one PostgreSQL store (a
real server: tests/conftest.py) holds and drains them all (gateway/fleet.py).

Each gateway runs the scripted engine in its own process, so each also loads what the
update names, as gateways with local engines do. A call running on another gateway when
the update starts finishes first and keeps the old version; a call sent there during the
update waits and gets the new one; a gateway started during the update holds its calls,
and one started after it stamps the new version. A version stamped without a checkpoint
does not pause: a call running across it is marked.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.gateway.server import GatewayProcess

from .conftest import MODEL, write_script

# A rollout's first call on a gateway is answered at once, its second slowly (about 6 s:
# long enough to be running while an update starts), later ones at once.
SLOW = {"text": " ".join(["slow"] * 60), "token_delay_s": 0.1}
SCRIPT = [{"text": "ok"}, SLOW, {"text": "done"}]


@contextlib.asynccontextmanager
async def _fleet(store: str, tmp_path: Path) -> AsyncIterator[Any]:
    script = write_script(tmp_path / "s.jsonl", SCRIPT)
    args = ["--engine", "scripted", "--script", str(script), "--model", MODEL, "--store", store]
    env = {"OPENFORGE_ADMIN_TOKEN": secrets.token_urlsafe(32)}
    procs: list[GatewayProcess] = []

    async def start() -> GatewayProcess:
        proc = await GatewayProcess.start(args, env=env)
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        await asyncio.gather(*(p.stop() for p in procs))


async def _admin(proc: GatewayProcess, method: str, path: str, **kw: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=proc.admin_headers, timeout=120) as c:
        r = await c.request(method, f"{proc.admin_url}/{path}", **kw)
        assert r.status_code in (200, 201), r.text
        return dict(r.json())


async def _until(proc: GatewayProcess, field: str, value: object) -> None:
    """Until the gateway's admin status shows ``field == value`` (bounded at 20 s)."""
    for _ in range(400):
        status = await _admin(proc, "GET", "status")
        if status[field] == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{proc.url}: {field} is {status[field]!r}, not {value!r}")


async def _call(proc: GatewayProcess, key: str, text: str) -> str:
    """One chat call through ``proc`` (streamed), read to its end; returns its text."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True}
    out = []
    async with (
        httpx.AsyncClient(timeout=120) as c,
        c.stream("POST", f"{proc.url}/r/{key}/v1/chat/completions", json=body) as r,
    ):
        assert r.status_code == 200
        async for line in r.aiter_lines():
            out.append(line)
    return "".join(out)


async def _calls(proc: GatewayProcess, rollout_id: str) -> list[dict[str, Any]]:
    return list((await _admin(proc, "GET", f"rollouts/{rollout_id}"))["calls"])


@pytest.mark.slow
async def test_a_weight_update_through_one_gateway_drains_and_stamps_them_all(
    postgres_url: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "v1"
    checkpoint.mkdir()
    async with _fleet(postgres_url, tmp_path) as start:
        a, b = await asyncio.gather(start(), start())
        first = await _admin(a, "POST", "rollouts", json={})
        second = await _admin(a, "POST", "rollouts", json={})
        await _call(b, first["key"], "one")
        slow = asyncio.create_task(_call(b, first["key"], "two"))  # its slow second call
        await _until(b, "in_flight", 1)
        update = asyncio.create_task(
            _admin(a, "POST", "weights", json={"version": "1", "path": str(checkpoint)})
        )
        await _until(b, "paused", True)
        # b drains its running call before anything loads: the update waits for it.
        assert (await _admin(b, "GET", "status"))["in_flight"] == 1 and not update.done()
        waiting = asyncio.create_task(_call(b, second["key"], "three"))
        late = await start()  # started during the update: it holds its calls too
        assert (await _admin(late, "GET", "status"))["paused"] is True
        answer = await update
        assert answer["weight_version"] == "1" and answer["paused"] is False
        assert slow.done()  # drained before the update returned
        await waiting
        later = await start()  # started after it: the fleet's version, its engine loaded
        third = await _admin(later, "POST", "rollouts", json={})
        await _call(later, third["key"], "four")
        statuses = [await _admin(p, "GET", "status") for p in (a, b, late, later)]
        # A version stamped without a checkpoint does not pause: a call running across
        # it keeps the version it was admitted under and is marked with the new one.
        fourth = await _admin(a, "POST", "rollouts", json={})
        await _call(a, fourth["key"], "five")
        across = asyncio.create_task(_call(a, fourth["key"], "six"))
        await _until(a, "in_flight", 1)
        await _admin(b, "POST", "weights", json={"version": "2"})
        await across
        await _until(later, "weight_version", "2")
        runs = [await _calls(a, r["rollout_id"]) for r in (first, second, third, fourth)]
    for status in statuses:
        assert status["weight_version"] == "1" and status["paused"] is False
        assert status["engine"]["weight_version"] == "1"  # each engine loaded it
    stamps = [[(c["weight_version"], c["status"]) for c in calls] for calls in runs]
    assert stamps == [
        [("0", "ok"), ("0", "ok")],  # the running call kept the weights it ran on
        [("1", "ok")],  # held during the update, run after it
        [("1", "ok")],  # on the gateway started after it
        [("1", "ok"), ("1", "ok")],
    ]
    marks = [c["render_info"].get("weight_version_at_end") for calls in runs for c in calls]
    assert marks == [None] * 5 + ["2"]


@pytest.mark.slow
async def test_an_update_whose_gateway_died_holds_the_fleet_until_a_resume(
    postgres_url: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "v1"
    checkpoint.mkdir()
    async with _fleet(postgres_url, tmp_path) as start:
        doomed, survivor = await asyncio.gather(start(), start())
        rollout = await _admin(survivor, "POST", "rollouts", json={})
        await _call(survivor, rollout["key"], "one")
        slow = asyncio.create_task(_call(survivor, rollout["key"], "two"))
        await _until(survivor, "in_flight", 1)
        body = {"version": "1", "path": str(checkpoint)}
        update = asyncio.create_task(_admin(doomed, "POST", "weights", json=body))
        await _until(survivor, "paused", True)
        await doomed.stop(signal.SIGKILL)  # while it waits for the survivor's drain
        with contextlib.suppress(httpx.HTTPError):
            await update
        await slow
        held = asyncio.create_task(_call(survivor, rollout["key"], "three"))
        # A resume while the dead gateway still counts as alive does not release its
        # update's hold; once it no longer does (10 s unseen), a resume does.
        first = await _admin(survivor, "POST", "resume")
        assert first["paused"] is True and not held.done()
        for _ in range(100):
            if not (await _admin(survivor, "POST", "resume"))["paused"]:
                break
            await asyncio.sleep(0.3)
        await held
        calls = await _calls(survivor, rollout["rollout_id"])
    assert first["weight_version"] == "0"
    assert [(c["weight_version"], c["status"]) for c in calls] == [("0", "ok")] * 3
