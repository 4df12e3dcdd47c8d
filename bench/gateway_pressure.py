"""The admin health probe and the gateway's memory while huge bodies are served.

A gateway child process (scripted engine, SQLite store, SmolLM2's tokenizer) is given what
once turned a benign rollout into ``infra_error`` ("gateway lost mid-run"): ``--idle``
idle keep-alive connections on the model listener and ``--bodies`` concurrent calls of
``--mb`` MB each (one long tool log, over the model's context: the cost under test is
receiving, parsing, rendering and recording it), repeated ``--rounds`` times. Meanwhile
the admin listener's ``GET /health`` is probed every 0.2 s, as the orchestrator's
``GatewayWatch`` does. Printed:

* the probe's latency: p50, max, and how many probes took over 1 s (the orchestrator
  gives up at ``health_timeout_s``, 10 s by default);
* the gateway's resident memory (VmRSS from /proc): before the bodies, at its peak, just
  after the rollouts are finished, and ``--settle`` seconds later (quiet).

    .venv/bin/python bench/gateway_pressure.py [--mb 60] [--bodies 2] [--idle 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = os.environ.get("OPENFORGE_BENCH_MODEL") or str(models_dir() / DEFAULT_MODEL)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _start(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str, str]:
    (tmp / "script.jsonl").write_text('{"text": "Done."}\n')
    port, admin_port, token = _port(), _port(), secrets.token_urlsafe(16)
    argv = [
        sys.executable, "-m", "openforge.gateway", "--engine", "scripted",
        "--script", str(tmp / "script.jsonl"), "--model", MODEL,
        "--store", str(tmp / "store.db"), "--port", str(port), "--admin-port", str(admin_port),
    ]  # fmt: skip
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": token}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    for _ in range(600):
        try:
            if httpx.get(admin + "/health", timeout=1).status_code == 200:
                return proc, url, admin, token
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the gateway did not start")


async def _idle(url: str, n: int) -> list[asyncio.StreamWriter]:
    """``n`` keep-alive connections, each having made one request, then silent."""
    host, port = url.removeprefix("http://").split(":")
    writers = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await reader.readuntil(b'{"status":"ok"}')
        writers.append(writer)
    return writers


async def _probe(admin: str, stop: asyncio.Event, out: list[float]) -> None:
    async with httpx.AsyncClient(timeout=60) as c:
        while not stop.is_set():
            t = time.perf_counter()
            await c.get(admin + "/health")
            out.append(time.perf_counter() - t)
            await asyncio.sleep(0.2)


async def _run(args: argparse.Namespace, proc: subprocess.Popen[bytes], url: str, admin: str,
               token: str) -> dict[str, float]:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    text = "log line with some words in it\n" * int(args.mb * (1 << 20) / 31)
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": text}]}
    idle = await _idle(url, args.idle)
    stats = {"rss before MB": _rss_mb(proc.pid)}
    stop, probes, peak = asyncio.Event(), [], [stats["rss before MB"]]

    async def watch_rss() -> None:
        while not stop.is_set():
            peak.append(_rss_mb(proc.pid))
            await asyncio.sleep(0.1)

    probing = [asyncio.create_task(_probe(admin, stop, probes)), asyncio.create_task(watch_rss())]
    async with httpx.AsyncClient(timeout=600) as c:
        for _ in range(args.rounds):
            minted = [
                (await c.post(admin + "/admin/rollouts", json={}, headers=headers)).json()
                for _ in range(args.bodies)
            ]
            await asyncio.gather(
                *(c.post(r["openai_base_url"] + "/chat/completions", json=body) for r in minted)
            )
            done = {"status": "completed", "reward": 0.0}
            for r in minted:
                finish = f"{admin}/admin/rollouts/{r['rollout_id']}/finish"
                (await c.post(finish, json=done, headers=headers)).raise_for_status()
    stats["rss peak MB"] = max(peak)
    stats["rss finished MB"] = _rss_mb(proc.pid)
    await asyncio.sleep(args.settle)
    stop.set()
    await asyncio.gather(*probing)
    stats["rss settled MB"] = _rss_mb(proc.pid)
    for w in idle:
        w.close()
    stats["probes"] = len(probes)
    stats["probe p50 ms"] = statistics.median(probes) * 1e3
    stats["probe max ms"] = max(probes) * 1e3
    stats["probes > 1 s"] = sum(p > 1 for p in probes)
    return stats


def main() -> None:
    """Start a gateway, apply the pressure, print what the probe and /proc saw."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=60.0)
    ap.add_argument("--bodies", type=int, default=2)
    ap.add_argument("--idle", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--settle", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="openforge-pressure-") as tmp:
        proc, url, admin, token = _start(Path(tmp))
        try:
            stats = asyncio.run(_run(args, proc, url, admin, token))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    print(f"{args.bodies} x {args.mb:g} MB bodies, {args.rounds} rounds, {args.idle} idle conns")
    for name, value in stats.items():
        print(f"  {name:<18}{value:>10.1f}")


if __name__ == "__main__":
    main()
