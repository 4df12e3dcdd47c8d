"""Orchestrator throughput on the local backend, beside plain subprocess runs of the same work.

    .venv/bin/python bench/rollouts.py [--quick] [--n 1000] [--concurrency 64 256]

Each rollout of the trivial harness: mint a key on a real scripted gateway, create a
bubblewrap sandbox, put the workspace, run ``echo hello > hello.txt`` as the harness, run a
``sh`` verifier, finish the rollout, tear down. The baseline runs the same two shell
commands with ``asyncio.create_subprocess_exec`` in a temp dir, same concurrency, no
sandbox and no gateway. Each level runs in a fresh child process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = models_dir() / DEFAULT_MODEL
HARNESS = "echo hello > hello.txt"
VERIFY = 'if [ "$(cat hello.txt)" = hello ]; then r=1; else r=0; fi; echo "{\\"reward\\": $r}"\n'


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def _task_dir(root: Path) -> Path:
    d = root / "trivial"
    (d / "verify").mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text('id = "trivial"\ninstruction = "write hello"\ntimeout = 60\n')
    (d / "verify" / "verify.sh").write_text(VERIFY)
    return d


async def _orchestrated(n: int, conc: int, gateway: str, work: Path) -> dict[str, float]:
    from openforge.rollouts import RolloutConfig, run_rollouts
    from openforge.suites import load_tasks

    task = load_tasks(_task_dir(work)).tasks[0]
    cfg = RolloutConfig(
        tasks=[task],
        harness="shell",
        harness_options={"command": HARNESS},
        gateway_url=gateway,
        n=n,
        concurrency=conc,
        out_dir=work / "run",
        backend_options={"root": work / "sandboxes", "cgroups": False},
    )
    t0 = time.perf_counter()
    results = await run_rollouts(cfg)
    wall = time.perf_counter() - t0
    ok = sum(r.reward == 1.0 for r in results)
    create = [r.timings["create"] for r in results if "create" in r.timings]
    overhead = [
        r.timings["total"] - r.timings.get("agent", 0) - r.timings.get("verify", 0) for r in results
    ]
    return {
        "rollouts": len(results),
        "ok": ok,
        "wall_s": wall,
        "per_s": len(results) / wall,
        "create_p50_ms": 1e3 * _pct(create, 50),
        "create_p99_ms": 1e3 * _pct(create, 99),
        "overhead_p50_ms": 1e3 * _pct(overhead, 50),
        "overhead_mean_ms": 1e3 * statistics.fmean(overhead),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


async def _baseline(n: int, conc: int, work: Path) -> dict[str, float]:
    sem = asyncio.Semaphore(conc)
    ok = 0

    async def one(i: int) -> None:
        nonlocal ok
        async with sem:
            d = work / f"b{i}"
            d.mkdir()
            for cmd in (HARNESS, VERIFY):
                p = await asyncio.create_subprocess_exec(
                    "/bin/sh", "-c", cmd, cwd=d, stdout=asyncio.subprocess.PIPE
                )
                out, _ = await p.communicate()
            ok += b'"reward": 1' in out
            shutil.rmtree(d)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    return {
        "rollouts": n,
        "ok": ok,
        "wall_s": wall,
        "per_s": n / wall,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.mode == "baseline":
            out = asyncio.run(_baseline(args.n, args.child_conc, work))
        else:
            out = asyncio.run(_orchestrated(args.n, args.child_conc, args.gateway, work))
    print(json.dumps(out))


def _run_child(mode: str, n: int, conc: int, gateway: str) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--n",
            str(n),
            "--child-conc",
            str(conc),
            "--gateway",
            gateway,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _start_gateway(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    port, admin_port = ports
    # The orchestrator children inherit the token through the environment.
    os.environ.setdefault("OPENFORGE_ADMIN_TOKEN", secrets.token_urlsafe(32))
    (tmp / "script.jsonl").write_text('{"text": "hello"}\n')
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "openforge"),
            "gateway",
            "--engine",
            "scripted",
            "--script",
            str(tmp / "script.jsonl"),
            "--model",
            str(MODEL),
            "--store",
            str(tmp / "store.db"),
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{admin_port}"  # what the orchestrator is given
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the gateway did not start")


def main() -> None:
    """Run both levels and print orchestrated vs baseline figures side by side."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="200 rollouts per level")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--child", choices=["orchestrated", "baseline"], help=argparse.SUPPRESS)
    ap.add_argument("--child-conc", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--gateway", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.mode = args.child
        _child(args)
        return
    n = 200 if args.quick else args.n
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_gateway(Path(tmp))
        try:
            rows = []
            for conc in args.concurrency:
                orch = _run_child("orchestrated", n, conc, url)
                base = _run_child("baseline", n, conc, url)
                rows.append((conc, orch, base))
        finally:
            proc.terminate()
            proc.wait()
    print(
        f"{n} rollouts per level; trivial shell harness; local bubblewrap backend; "
        "scripted gateway subprocess\n"
    )
    hdr = (
        f"{'conc':>5} {'':>13} {'rollouts/s':>10} {'ok':>6} {'create p50':>11} "
        f"{'create p99':>11} {'overhead p50':>13} {'overhead mean':>14} {'peak RSS':>9}"
    )
    print(hdr)
    for conc, o, b in rows:
        print(
            f"{conc:>5} {'orchestrated':>13} {o['per_s']:>10.1f} {o['ok']:>6.0f} "
            f"{o['create_p50_ms']:>9.2f}ms {o['create_p99_ms']:>9.2f}ms "
            f"{o['overhead_p50_ms']:>11.1f}ms {o['overhead_mean_ms']:>12.1f}ms "
            f"{o['peak_rss_mb']:>7.0f}MB"
        )
        print(
            f"{conc:>5} {'baseline':>13} {b['per_s']:>10.1f} {b['ok']:>6.0f} {'-':>11} "
            f"{'-':>11} {'-':>13} {'-':>14} {b['peak_rss_mb']:>7.0f}MB"
        )
    for conc, o, b in rows:
        extra = 1e3 / o["per_s"] - 1e3 / b["per_s"]
        print(
            f"conc {conc}: orchestration costs {extra:.1f} ms of machine time per rollout "
            "beyond the baseline (sandbox, gateway mint/finish, verifier in bwrap)"
        )
    print("overhead = a rollout's time in its slot outside agent and verifier (incl. waiting)")
    print("\ntargets: create p50 <= 50 ms; >= 20 rollouts/s; peak RSS <= 500 MB at 256")


if __name__ == "__main__":
    main()
