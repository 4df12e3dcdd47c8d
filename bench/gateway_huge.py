"""Other calls' latency while huge bodies are served: head-of-line blocking, before and after.

A gateway child process (scripted engine, SQLite store, SmolLM2's tokenizer) serves 20
connections making small agent-sized Chat Completions calls back to back. Three phases, each
in the same run and on the same gateway build:

* ``quiet``         — only the 20 small-call connections (the baseline);
* ``huge, inline``  — one more connection sends 10 MB bodies back to back, parsed and
                      rendered on the event loop (``--offload-mb`` above the body size:
                      how the gateway behaved before);
* ``huge, offload`` — the same, with bodies of 1 MB or more parsed and rendered on a worker
                      thread (the default).

Printed: the small calls' p50/p99/max latency and calls/s, and the huge calls' own latency.

    .venv/bin/python bench/gateway_huge.py [--seconds 15] [--huge-mb 10]
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
SYSTEM = "You are a careful coding agent. " * 120  # ~4 KB, like a harness system prompt


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start(tmp: Path, offload_mb: float) -> tuple[subprocess.Popen[bytes], str, str, str]:
    (tmp / "script.jsonl").write_text('{"text": "Done: the file is written."}\n')
    port, admin_port, token = _port(), _port(), secrets.token_urlsafe(16)
    argv = [
        str(Path(sys.executable).parent / "openforge"), "gateway", "--engine", "scripted",
        "--script", str(tmp / "script.jsonl"), "--model", MODEL,
        "--store", str(tmp / f"store-{offload_mb}.db"), "--port", str(port),
        "--admin-port", str(admin_port), "--offload-mb", str(offload_mb), "--max-body-mb", "64",
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


async def _mint(client: httpx.AsyncClient, admin: str, token: str) -> str:
    r = await client.post(
        admin + "/admin/rollouts", json={}, headers={"Authorization": f"Bearer {token}"}
    )
    return str(r.json()["openai_base_url"])


async def _small(base: str, stop: float, out: list[float]) -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Write hello.txt."},
    ]
    body = {"model": "m", "max_tokens": 16, "messages": messages}
    async with httpx.AsyncClient(timeout=300) as c:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            r = await c.post(base + "/chat/completions", json=body)
            r.raise_for_status()
            out.append(time.perf_counter() - t)


async def _huge(base: str, stop: float, mb: float, out: list[float]) -> None:
    # Big but within the context (a 10 MB tool log is refused as too long after rendering:
    # the cost under test is receiving, parsing and rendering it).
    text = "log line with some words in it\n" * int(mb * (1 << 20) / 31)
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": text}]}
    async with httpx.AsyncClient(timeout=600) as c:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await c.post(base + "/chat/completions", json=body)
            out.append(time.perf_counter() - t)


async def _phase(admin: str, token: str, seconds: float, huge_mb: float) -> dict[str, float]:
    async with httpx.AsyncClient() as c:
        bases = [await _mint(c, admin, token) for _ in range(21)]
    small: list[float] = []
    huge: list[float] = []
    stop = time.perf_counter() + seconds
    tasks = [_small(b, stop, small) for b in bases[:20]]
    if huge_mb:
        tasks.append(_huge(bases[20], stop, huge_mb, huge))
    t0 = time.perf_counter()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    q = statistics.quantiles(small, n=100)
    return {
        "calls/s": len(small) / wall, "p50 ms": q[49] * 1e3, "p99 ms": q[98] * 1e3,
        "max ms": max(small) * 1e3, "huge calls": len(huge),
        "huge p50 s": statistics.median(huge) if huge else 0.0,
    }  # fmt: skip


def main() -> None:
    """Run the three phases and print them side by side."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--huge-mb", type=float, default=10.0)
    args = ap.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="openforge-huge-") as tmp:
        for name, offload_mb, huge_mb in (
            ("quiet", 1.0, 0.0),
            ("huge, inline", 1024.0, args.huge_mb),
            ("huge, offload", 1.0, args.huge_mb),
        ):
            proc, _, admin, token = _start(Path(tmp), offload_mb)
            try:
                rows.append((name, asyncio.run(_phase(admin, token, args.seconds, huge_mb))))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    cols = list(rows[0][1])
    print(f"20 small-call connections, {args.seconds:g} s a phase, huge bodies {args.huge_mb:g} MB")
    print(f"{'phase':<16}" + "".join(f"{c:>13}" for c in cols))
    for name, row in rows:
        print(f"{name:<16}" + "".join(f"{row[c]:>13.1f}" for c in cols))


if __name__ == "__main__":
    main()
