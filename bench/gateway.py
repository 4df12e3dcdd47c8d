"""Gateway overhead: added latency and calls/s at concurrency 1, 64, 256, streaming and not.

Three targets get the same Chat Completions load (a 4 KB agent-style body, 2 tools, a
20-token answer), each served from one pinned core while the load generator runs in
another process on another core:

* ``engine``    — an instant OpenAI-compatible engine server (raw ASGI on uvicorn): the
                  baseline a request costs with no gateway at all;
* ``openforge`` — the OpenForge gateway with the scripted engine (instant, in process):
                  auth, parse, token-exact render, stream parse, dialect encode and a
                  durable SQLite record per call;
* ``rllm``      — rllm-model-gateway (PyPI) in front of the instant engine server, when
                  it installs (into a throwaway venv under /tmp, never the project's).

``added p50``/``added p99`` are a target's latency percentiles minus the engine's at the
same mode and concurrency: what the gateway adds to the engine alone. ``TTFT`` is the time
to the first body bytes of the answer (for a stream, its first event; for JSON, the whole
answer). The issue's "p99 ≤ 10 ms at 256 concurrent streams" is read as the added p99
with agent-like pacing, ``--think-ms 500``: each connection pauses after each call for
0.5-1.5 × that long (a fixed pause phase-locks the connections; docs/gateway.md).

    .venv/bin/python bench/gateway.py [--quick] [--no-peer]
    .venv/bin/python bench/gateway.py --mode stream --conc 256 --think-ms 500 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = os.environ.get("OPENFORGE_BENCH_MODEL") or str(models_dir() / DEFAULT_MODEL)
ANSWER = "The answer is forty-two, computed from the six by seven table above."
SYSTEM = "You are a careful coding agent. " * 120  # ~4 KB, like a harness system prompt
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool: " + "does useful work. " * 10,
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}},
        },
    }
    for name in ("bash", "read_file")
]
PEER_VENV = Path("/tmp/openforge-bench-rllm")


def _body(stream: bool) -> bytes:
    return json.dumps(
        {
            "model": "bench",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What is six times seven?"},
            ],
            "tools": TOOLS,
            "stream": stream,
        }
    ).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


# ---- the instant engine server ------------------------------------------------------


def serve_engine(port: int) -> None:
    """An OpenAI-compatible server that answers every chat call instantly."""
    import uvicorn

    words = ANSWER.split(" ")
    pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
    full = json.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920},
        }
    ).encode()

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    stream_parts = [chunk({"role": "assistant", "content": ""})]
    stream_parts += [chunk({"content": p}) for p in pieces]
    stream_parts += [chunk({}, "stop"), b"data: [DONE]\n\n"]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if b'"stream": true' in body or b'"stream":true' in body:
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for part in stream_parts:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": full})

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        log_level="warning",
        access_log=False,
        lifespan="off",
    )


# ---- the OpenForge gateway ----------------------------------------------------------


def serve_gateway(port: int, store: str, keys_file: str, n_keys: int) -> None:
    """The gateway with an instant scripted engine; writes ``n_keys`` rollout keys."""
    import uvloop

    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    script = Path(store).with_suffix(".jsonl")
    script.write_text(json.dumps({"text": ANSWER}) + "\n")

    async def main() -> None:
        engine = ScriptedEngine.for_model(script, MODEL)
        gw = Gateway(engine, SqliteStore(store), model=MODEL, port=port)
        await gw.start()
        keys = [(await gw.store.create_rollout()).key for _ in range(n_keys)]
        Path(keys_file).write_text("\n".join(keys))
        await asyncio.Event().wait()

    uvloop.run(main())


# ---- the load generator ---------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, float]:
    """(status, when the first body bytes arrived)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    first = 0.0
    if b"transfer-encoding: chunked" in lower:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.strip(), 16)
            await reader.readexactly(size + 2)
            if not first:
                first = time.perf_counter()
            if size == 0:
                return status, first
    i = lower.find(b"content-length:")
    end = lower.find(b"\r\n", i)
    await reader.readexactly(int(lower[i + 15 : end]))
    return status, time.perf_counter()


async def _worker(
    host: str,
    port: int,
    path: str,
    body: bytes,
    key: str,
    stop_at: float,
    warm_until: float,
    lat: list[float],
    ttft: list[float],
    think: float,
) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    if think:  # spread the connections' calls over the think time, as agents would be
        await asyncio.sleep(random.uniform(0, think))
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    errors = 0
    try:
        while True:
            t = time.perf_counter()
            if t >= stop_at:
                return errors
            writer.write(head + body)
            status, first = await _read_response(reader)
            done = time.perf_counter()
            if status != 200:
                errors += 1
            elif t >= warm_until:
                lat.append(done - t)
                ttft.append(first - t)
            if think:
                # Agents' tool runs vary. A fixed pause phase-locks the connections: calls
                # delayed together by one stall come back together 500 ms later, as a
                # burst that grows every round (seen on this bench: clusters of 10-55
                # calls every 0.51 s, each ending 8-30 ms late).
                await asyncio.sleep(think * random.uniform(0.5, 1.5))
    finally:
        writer.close()


def load(
    url: str,
    path: str,
    stream: bool,
    conc: int,
    seconds: float,
    keys: list[str],
    think: float = 0.0,
) -> None:
    """Run ``conc`` keep-alive connections for ``seconds``; print one JSON result line."""
    import uvloop

    host, port = url.removeprefix("http://").split(":")
    body = _body(stream)

    async def main() -> dict[str, Any]:
        lat: list[float] = []
        ttft: list[float] = []
        start = time.perf_counter()
        warm = start + min(0.5, seconds / 4)
        stop = warm + seconds
        errs = await asyncio.gather(
            *(
                _worker(
                    host, int(port), path, body, keys[i % len(keys)], stop, warm, lat, ttft, think
                )
                for i in range(conc)
            )
        )
        lat.sort()
        ttft.sort()
        n = len(lat)

        def pct(xs: list[float], q: float) -> float:
            return 1000 * xs[min(n - 1, int(n * q))] if n else float("nan")

        return {
            "n": n,
            "errors": sum(errs),
            "rps": n / seconds,
            "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99),
            "ttft_p50_ms": pct(ttft, 0.5),
            "ttft_p99_ms": pct(ttft, 0.99),
        }

    print(json.dumps(uvloop.run(main())), flush=True)


# ---- orchestration --------------------------------------------------------------------


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _spawn(args: list[str], cpu: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, "--pin", str(cpu), *args],
        stdout=subprocess.DEVNULL,
    )


def _run_load(
    url: str,
    path: str,
    stream: bool,
    conc: int,
    seconds: float,
    keys_file: str | None,
    think: float = 0.0,
) -> dict[str, Any]:
    args = [
        sys.executable,
        __file__,
        "--pin",
        "1",
        "--load",
        url,
        path,
        str(int(stream)),
        str(conc),
        str(seconds),
        keys_file or "-",
        str(think),
    ]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _peer(engine_url: str) -> tuple[subprocess.Popen[bytes], str] | None:
    """Start rllm-model-gateway in front of the engine, installing it if needed."""
    exe = PEER_VENV / "bin" / "rllm-model-gateway"
    if not exe.exists():
        try:
            subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
            subprocess.run(
                [str(PEER_VENV / "bin" / "pip"), "install", "-q", "rllm-model-gateway"],
                check=True,
                timeout=600,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"# rllm-model-gateway did not install: {exc}", file=sys.stderr)
            return None
    if not exe.exists():
        print("# rllm-model-gateway installed no console script", file=sys.stderr)
        return None
    port = _free_port()
    db = tempfile.mktemp(suffix=".db")
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            str(exe),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--worker",
            engine_url + "/v1",
            "--db-path",
            db,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_port(port, proc, 60)
    except RuntimeError as exc:
        print(f"# rllm-model-gateway did not start: {exc}", file=sys.stderr)
        proc.kill()
        return None
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (CI smoke)")
    ap.add_argument("--no-peer", action="store_true", help="skip rllm-model-gateway")
    ap.add_argument("--mode", choices=("json", "stream", "both"), default="both")
    ap.add_argument("--conc", type=int, nargs="+", default=[1, 64, 256], help="concurrencies")
    ap.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="pause after each call per connection (agents running tools); 0: closed loop",
    )
    ap.add_argument("--seconds", type=float, help="measured seconds per run (default 5; 1.5 quick)")
    ap.add_argument("--pin", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--serve-engine", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--serve-gateway", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--load", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pin is not None:
        _pin(a.pin)
    if a.serve_engine:
        serve_engine(a.serve_engine)
        return
    if a.serve_gateway:
        port, store, keys_file, n = a.serve_gateway
        serve_gateway(int(port), store, keys_file, int(n))
        return
    if a.load:
        url, path, stream, conc, secs, keys_file, think = a.load
        keys = Path(keys_file).read_text().split() if keys_file != "-" else ["none"]
        load(url, path, stream == "1", int(conc), float(secs), keys, float(think))
        return
    modes = {"json": (False,), "stream": (True,), "both": (False, True)}[a.mode]
    run_all(a.quick, not a.no_peer, modes, tuple(a.conc), a.think_ms / 1000, a.seconds)


def run_all(
    quick: bool,
    peer: bool,
    modes: tuple[bool, ...] = (False, True),
    concs: tuple[int, ...] = (1, 64, 256),
    think: float = 0.0,
    seconds: float | None = None,
) -> None:
    """Measure every target and print the table."""
    seconds = seconds or (1.5 if quick else 5.0)
    tmp = Path(tempfile.mkdtemp(prefix="openforge-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        eport = _free_port()
        procs.append(_spawn(["--serve-engine", str(eport)], 0))
        _wait_port(eport, procs[-1])
        engine_url = f"http://127.0.0.1:{eport}"
        gport = _free_port()
        keys_file = str(tmp / "keys.txt")
        procs.append(
            _spawn(["--serve-gateway", str(gport), str(tmp / "bench.db"), keys_file, "256"], 0)
        )
        _wait_port(gport, procs[-1])
        while not Path(keys_file).exists():
            time.sleep(0.05)
        targets: list[tuple[str, str, str | None]] = [
            ("engine", engine_url, None),
            ("openforge", f"http://127.0.0.1:{gport}", keys_file),
        ]
        if peer and shutil.which("taskset"):
            started = _peer(engine_url)
            if started is not None:
                procs.append(started[0])
                targets.append(("rllm", started[1], None))
        results: dict[tuple[str, bool, int], dict[str, Any]] = {}
        for stream in modes:
            for conc in concs:
                for name, url, kf in targets:
                    results[(name, stream, conc)] = _run_load(
                        url, "/v1/chat/completions", stream, conc, seconds, kf, think
                    )
        _print(results, targets, concs, modes)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _print(
    results: dict[tuple[str, bool, int], dict[str, Any]],
    targets: list[tuple[str, str, str | None]],
    concs: tuple[int, ...],
    modes: tuple[bool, ...],
) -> None:
    print(
        f"{'mode':<7}{'conc':>5} {'target':<10}{'calls/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'added p50':>11}{'added p99':>11}{'TTFT p50':>10}{'TTFT p99':>10}{'errors':>8}"
    )
    for stream in modes:
        for conc in concs:
            base = results[("engine", stream, conc)]
            for name, _, _ in targets:
                r = results[(name, stream, conc)]
                add50 = add99 = ""
                if name != "engine":
                    add50 = f"{r['p50_ms'] - base['p50_ms']:+.2f}"
                    add99 = f"{r['p99_ms'] - base['p99_ms']:+.2f}"
                print(
                    f"{'stream' if stream else 'json':<7}{conc:>5} {name:<10}{r['rps']:>9.0f}"
                    f"{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}{add50:>11}{add99:>11}"
                    f"{r['ttft_p50_ms']:>10.2f}{r['ttft_p99_ms']:>10.2f}{r['errors']:>8}"
                )


if __name__ == "__main__":
    main()
