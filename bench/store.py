"""Store throughput and cost: SQLite against PostgreSQL, and gateway replicas on PostgreSQL.

Part 1, the store alone (in this process): ``R`` concurrent rollouts each record calls
back to back (``allocate_seq`` then ``record_call`` of an agent-sized call: 3,000 prompt
ids, 60 output ids and logprobs, a 6 KB request), for ``--seconds``. Printed per backend
and ``R`` in (1, 64, 256): calls committed per second, the latency a call's recording
adds (p50/p99 of allocate + record, i.e. until durable), and CPU per call: this process
(encoding, the driver, SQLite itself) and, for PostgreSQL, the server's processes.
``sqlite`` is the default (WAL, ``synchronous=NORMAL``: survives the gateway's death, an
fsync only at checkpoints); ``postgresql`` the default (``synchronous_commit=on``: a WAL
flush per group, survives the server's and the machine's crash too); ``pg-async`` the
same with ``synchronous_commit=off`` in the URL (survives the gateway's death, like
SQLite's default, not the server's crash).

Part 2, the gateway: ``openforge gateway`` processes (scripted engine, so the engine
costs nothing) on one PostgreSQL database, 1, 2 and 3 of them, and the baseline beside
them in the same run: one gateway on SQLite. A load generator in this process keeps 64
rollouts calling (non-streamed Chat Completions, a 2 KB agent-style body), each rollout
sticking to one replica as a load balancer hashing the rollout key would. Printed:
calls/s, and CPU per call of the gateways and of the database server, from /proc. On a
machine with few cores the replicas share them, so calls/s stops growing where the cores
run out; CPU per call is what projects to a larger machine.

    .venv/bin/python bench/store.py [--seconds 5] [--skip-gateway]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from openforge.gateway.server import GatewayProcess
from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.store.base import Store
from openforge.store.location import open_store
from openforge.store.pgcluster import LocalCluster
from openforge.store.schemas import CallRecord, CallStatus

MODEL = os.environ.get("OPENFORGE_BENCH_MODEL") or str(models_dir() / DEFAULT_MODEL)
TICK = os.sysconf("SC_CLK_TCK")
BODY = orjson.dumps(
    {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a careful coding agent. " * 60},
            {"role": "user", "content": "List the files and tell me what they hold."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": "Run a command. " * 10,
                    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
                },
            }
        ],
    }
)


def _proc_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds (user + system) of a process; with its reaped children's when asked."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def _server_cpu(cluster: LocalCluster) -> float:
    """CPU seconds of a PostgreSQL server: the postmaster, its live and its exited backends."""
    master = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = _proc_cpu(master, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == master:
            total += (int(stat[11]) + int(stat[12])) / TICK
    return total


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _call(rollout_id: str, seq: int) -> CallRecord:
    return CallRecord(
        id=f"c_{rollout_id}_{seq}",
        rollout_id=rollout_id,
        seq=seq,
        dialect="openai_chat",
        status=CallStatus.OK,
        prompt_ids=list(range(1000, 4000)),
        output_ids=list(range(60)),
        output_logprobs=[-0.5] * 60,
        finish_reason="tool_calls",
        request_model="m",
        raw_request=BODY * 3,
        conversation={"messages": [{"role": "user", "content": "x" * 500}]},
        completion={"text": "ok", "tool_calls": []},
        created_at=time.time(),
        total_s=0.01,
    )


async def _store_run(store: Store, rollouts: int, seconds: float) -> tuple[int, list[float]]:
    ids = [(await store.create_rollout()).id for _ in range(rollouts)]
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def rollout(rollout_id: str) -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            seq = await store.allocate_seq(rollout_id)
            await store.record_call(_call(rollout_id, seq))
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(rollout(r) for r in ids))
    return len(latencies), latencies


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else 0.0


async def bench_stores(cluster: LocalCluster, seconds: float, tmp: Path) -> None:
    """Part 1: the store alone, SQLite and PostgreSQL at 1, 64, 256 concurrent rollouts."""
    print(f"\n== store alone: {seconds:.0f} s per row; latency = allocate_seq + record_call")
    print(
        f"{'backend':<11}{'rollouts':>9}{'calls/s':>10}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'cpu/call ms':>13}{'server ms':>11}"
    )
    for backend in ("sqlite", "postgresql", "pg-async"):
        for rollouts in (1, 64, 256):
            if backend == "sqlite":
                location = str(tmp / f"bench-{rollouts}-{secrets.token_hex(3)}.db")
            else:
                location = cluster.create_database(f"bench_{rollouts}_{secrets.token_hex(3)}")
            if backend == "pg-async":  # commits not flushed: safe from a gateway's death only
                location += "?options=-c%20synchronous_commit%3Doff"
            store = open_store(location)
            await store.create_rollout()  # connect before measuring
            cpu0, srv0, t0 = _self_cpu(), _server_cpu(cluster), time.perf_counter()
            n, lat = await _store_run(store, rollouts, seconds)
            wall = time.perf_counter() - t0
            cpu, srv = _self_cpu() - cpu0, _server_cpu(cluster) - srv0
            await store.close()
            server = f"{srv / n * 1000:>11.3f}" if backend != "sqlite" else f"{'-':>11}"
            print(
                f"{backend:<11}{rollouts:>9}{n / wall:>10.0f}{_ms(lat, 50):>9.2f}"
                f"{_ms(lat, 99):>9.2f}{cpu / n * 1000:>13.3f}{server}",
                flush=True,
            )


async def _gateways(store: str, n: int) -> list[GatewayProcess]:
    script = Path(tempfile.mkdtemp(prefix="openforge-bench-")) / "s.jsonl"
    script.write_bytes(orjson.dumps({"text": "The files hold the answer, forty-two."}) + b"\n")
    args = ["--engine", "scripted", "--script", str(script), "--model", MODEL, "--store", store]
    env = {"OPENFORGE_ADMIN_TOKEN": secrets.token_urlsafe(32)}
    return list(await asyncio.gather(*(GatewayProcess.start(args, env=env) for _ in range(n))))


async def _load(urls: list[str], admin: GatewayProcess, rollouts: int, seconds: float) -> int:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=512)) as c:
        mint = admin.admin_url + "/rollouts"
        keys = [
            (await c.post(mint, json={}, headers=admin.admin_headers)).json()["key"]
            for _ in range(rollouts)
        ]
        done = 0
        deadline = time.perf_counter() + seconds

        async def rollout(i: int, key: str) -> None:
            nonlocal done
            url = f"{urls[i % len(urls)]}/r/{key}/v1/chat/completions"
            headers = {"content-type": "application/json"}
            while time.perf_counter() < deadline:
                r = await c.post(url, content=BODY, headers=headers)
                r.raise_for_status()
                done += 1

        await asyncio.gather(*(rollout(i, k) for i, k in enumerate(keys)))
        return done


async def bench_gateways(cluster: LocalCluster, seconds: float, tmp: Path) -> None:
    """Part 2: calls/s of 1, 2, 3 gateway replicas on PostgreSQL; one on SQLite beside."""
    print(f"\n== gateways (scripted engine), 64 rollouts, {seconds:.0f} s per row")
    print(
        f"{'store':<12}{'replicas':>9}{'calls/s':>10}{'gw cpu/call ms':>16}{'db cpu/call ms':>16}"
    )
    setups = [("sqlite", 1), ("postgresql", 1), ("postgresql", 2), ("postgresql", 3)]
    for backend, replicas in setups:
        if backend == "sqlite":
            store = str(tmp / f"gw-{secrets.token_hex(3)}.db")
        else:
            store = cluster.create_database(f"gw_{replicas}_{secrets.token_hex(3)}")
        procs = await _gateways(store, replicas)
        try:
            urls = [p.url for p in procs]
            await _load(urls, procs[0], 8, 1.0)  # warm: tokenizer caches, pools
            pids = [p.proc.pid for p in procs]
            gw0 = sum(_proc_cpu(pid) for pid in pids)
            db0, t0 = _server_cpu(cluster), time.perf_counter()
            n = await _load(urls, procs[0], 64, seconds)
            wall = time.perf_counter() - t0
            gw = sum(_proc_cpu(pid) for pid in pids) - gw0
            db = _server_cpu(cluster) - db0
        finally:
            await asyncio.gather(*(p.stop() for p in procs))
        dbs = f"{db / n * 1000:>16.3f}" if backend == "postgresql" else f"{'-':>16}"
        label = backend + (" (base)" if backend == "sqlite" else "")
        print(f"{label:<12}{replicas:>9}{n / wall:>10.0f}{gw / n * 1000:>16.3f}{dbs}", flush=True)


async def main() -> None:
    """Run both parts against a private PostgreSQL cluster and temporary SQLite files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip-gateway", action="store_true")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}  python: {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp, LocalCluster.temporary() as cluster:
        await bench_stores(cluster, args.seconds, Path(tmp))
        if not args.skip_gateway:
            await bench_gateways(cluster, args.seconds, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
