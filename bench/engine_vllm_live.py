"""The gateway in front of a live vLLM, beside vLLM alone, in the same run.

vLLM's CPU build (``.venv-vllm``, scripts/install-vllm.sh) is started as the live tests
start it (tests/live/vllm_server.py, with an 8,192-token context) on SmolLM2's weights
with the tool-aware chat template of tests/live/tool_model.py, so vLLM's own chat route
and the gateway render the same prompt ids for the agent body (tests/live/test_vllm_template.py
checks exactly that). Two targets, one server:

* ``vllm``     — ``POST /v1/chat/completions`` on vLLM itself (it renders, samples and
  answers; ``tool_choice: none``, which still renders the tools: SmolLM2 has no token for
  vLLM's Hermes tool parser);
* ``gateway``  — ``openforge gateway --engine vllm`` (a child process) in front of it, one
  rollout key per connection: it renders, asks vLLM's ``/v1/completions`` with the ids,
  parses, records every call in its SQLite store, and answers.

The body is bench/gateway_workload.py's agent body (a 6 KB system prompt, 10 tools, a
task, one tool call) whose tool result is ``--size`` characters of new source text per
call; greedy, ``--max-tokens`` tokens at most, answered whole (JSON). Each connection makes
``--calls`` calls one after another; a call to each target first warms vLLM's prefix cache
with the shared system turn and the gateway's template rendering (its first imports
transformers). Columns: calls/s, latency p50 / p99 (ms), and the gateway's
added p50 as a share of vLLM's own at the same concurrency. vLLM decodes on one core of
this 2-core machine and the bench's own client and the gateway share the other, so the
numbers move with other load (the 1-minute load average is printed).

    .venv/bin/python bench/engine_vllm_live.py [--conc 1 8 32] [--calls 3] [--size 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from tests.live.tool_model import build_tool_model  # noqa: E402
from tests.live.vllm_server import SERVED, VLLMServer, vllm_missing  # noqa: E402

import gateway_workload as wl  # noqa: E402
from openforge.models.registry import DEFAULT_MODEL, resolve_model  # noqa: E402

TOKEN = "bench-admin-token"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_gateway(tmp: Path, vllm_url: str, model: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``openforge gateway --engine vllm`` in front of ``vllm_url``; (process, admin URL)."""
    port, admin = free_port(), free_port()
    args = [str(Path(sys.executable).parent / "openforge"), "gateway", "--engine", "vllm"]
    args += ["--url", vllm_url, "--model", str(model), "--served-model", SERVED]
    args += ["--store", str(tmp / "gateway.db"), "--port", str(port), "--admin-port", str(admin)]
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": TOKEN}
    proc = subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{admin}"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit("the gateway exited at start")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the gateway did not start")


def body(content: str, max_tokens: int, direct: bool) -> dict[str, Any]:
    """The agent body with ``content`` as the tool result."""
    made = wl._agent(False)
    made["messages"][-1]["content"] = content
    made.update(max_tokens=max_tokens, temperature=0)
    if direct:
        made.update(model=SERVED, tool_choice="none")
    return made


async def run(
    urls: list[str], direct: bool, conc: int, calls: int, size: int, max_tokens: int, seed: int
) -> dict[str, float]:
    """``conc`` connections making ``calls`` calls each; calls/s and latency percentiles."""
    source = wl.NewContent(wl.corpus(), seed)
    latencies: list[float] = []

    async def connection(client: httpx.AsyncClient, url: str) -> None:
        for _ in range(calls):
            sent = body(source.take(size), max_tokens, direct)
            t0 = time.perf_counter()
            got = await client.post(url, json=sent)
            if got.status_code != 200:
                raise SystemExit(f"{url}: {got.status_code} {got.text[:300]}")
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(connection(client, urls[i % len(urls)]) for i in range(conc)))
        wall = time.perf_counter() - t0
    latencies.sort()
    return {
        "calls_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


async def mint(admin: str, n: int) -> list[str]:
    """``n`` rollouts' OpenAI chat URLs from the gateway's admin API."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        made = [(await client.post(admin + "/admin/rollouts", json={})).json() for _ in range(n)]
    return [m["openai_base_url"] + "/chat/completions" for m in made]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--calls", type=int, default=3, help="calls per connection")
    parser.add_argument("--size", type=int, default=1000, help="new characters per call")
    parser.add_argument("--max-tokens", type=int, default=16)
    opts = parser.parse_args()
    missing = vllm_missing()
    if missing is not None:
        raise SystemExit(missing)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model = build_tool_model(resolve_model(DEFAULT_MODEL), tmp / "model")
        server = VLLMServer.start_live(model, tmp, max_model_len=8192)
        gateway: subprocess.Popen[bytes] | None = None
        try:
            print(f"vLLM up in {server.startup_s:.0f} s, {server.rss_bytes() / 2**30:.2f} GB")
            gateway, admin = start_gateway(tmp, server.url, model)
            direct = [server.url + "/v1/chat/completions"]
            # Warm both: vLLM's prefix cache gets the shared system turn, and the gateway
            # loads what its first render of a template model imports (transformers).
            asyncio.run(run(direct, True, 1, 1, opts.size, opts.max_tokens, 98))
            warm = asyncio.run(mint(admin, 1))
            asyncio.run(run(warm, False, 1, 1, opts.size, opts.max_tokens, 99))
            print(f"agent body, {opts.size} new chars per call, max_tokens {opts.max_tokens}, "
                  f"{opts.calls} calls per connection, answered whole")  # fmt: skip
            print(f"{'conns':>5} | {'vLLM calls/s':>12} {'p50':>8} {'p99':>8} | "
                  f"{'gateway calls/s':>15} {'p50':>8} {'p99':>8} | {'added p50':>9} "
                  f"{'share':>6} | load")  # fmt: skip
            for i, conc in enumerate(opts.conc):
                urls = asyncio.run(mint(admin, conc))
                alone = asyncio.run(
                    run(direct, True, conc, opts.calls, opts.size, opts.max_tokens, i)
                )
                fronted = asyncio.run(
                    run(urls, False, conc, opts.calls, opts.size, opts.max_tokens, 100 + i)
                )
                added = fronted["p50_ms"] - alone["p50_ms"]
                print(
                    f"{conc:>5} | {alone['calls_s']:>12.2f} {alone['p50_ms']:>8.0f} "
                    f"{alone['p99_ms']:>8.0f} | {fronted['calls_s']:>15.2f} "
                    f"{fronted['p50_ms']:>8.0f} {fronted['p99_ms']:>8.0f} | {added:>9.0f} "
                    f"{100 * added / alone['p50_ms']:>5.1f}% | {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        finally:
            if gateway is not None:
                gateway.terminate()
                gateway.wait(timeout=30)
            server.stop()


if __name__ == "__main__":
    main()
