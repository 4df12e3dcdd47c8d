"""bench/gateway.py's load generator: keep-alive HTTP/1.1 connections on asyncio streams.

Run in its own process (pinned by the caller); ``load(spec)`` returns one result dict.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from pathlib import Path
from typing import Any

import uvloop

import gateway_workload as wl


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one response, chunked or not."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            parts.append((await reader.readexactly(size + 2))[:-2])
            if size == 0:
                return status, b"".join(parts)
    i = lower.find(b"content-length:")
    end = lower.find(b"\r\n", i)
    return status, await reader.readexactly(int(lower[i + 15 : end]))


async def _reopen(conn: Conn) -> None:
    """Connect ``conn`` again, retrying for a while (a server restarting its listener)."""
    for _ in range(50):
        try:
            await conn.open()
            return
        except OSError:
            await asyncio.sleep(0.1)
    await conn.open()


class Conn:
    """One keep-alive connection."""

    def __init__(self, url: str) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def call(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\nanthropic-version: 2023-06-01\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        return await _response(self.reader)

    def close(self) -> None:
        self.writer.close()


def cpu_s(pids: list[int]) -> float:
    """CPU seconds the processes ``pids`` (all their threads) ran so far, from the
    scheduler's nanosecond counters (/proc/PID/task/TID/schedstat)."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that just ended
    return total / 1e9


def _path(spec: dict[str, Any], key: str) -> str:
    path = wl.WORKLOADS[spec["workload"]][0]
    if spec["kind"] == "openforge":
        return f"/r/{key}{path}"
    if spec["kind"] == "rllm":
        return f"/sessions/{key}{path}"
    return path


def _pct(xs: list[float], q: float) -> float:
    return 1000 * xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


async def _closed_loop(spec: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``conc`` connections, each sending its next call when its last one is answered.

    The measured window opens once every connection has had its first answer, and no
    sooner than ``settle`` in (0.5 s, or a quarter of ``seconds`` when that is shorter):
    the first wave is every connection's first call at once, each a rollout's first for
    keys new to this run, and its queue is a start-up transient, not the steady state a
    closed loop measures. It lasts ``first_wave_s``; the p99 over calls answered from
    ``settle`` on, the wave included (what this bench reported before), is
    ``p99_with_start_ms``. A call counts if it started in the window, however late it
    ends, so the slowest are not cut off."""
    template = wl.Template(spec["workload"], spec["stream"])
    text = wl.corpus()
    fresh = spec["case"] == "fresh"
    counter = itertools.count()
    lat: list[float] = []
    with_start: list[float] = []  # done after `settle`, started whenever
    answered = [0]  # every 200, in the window or not (the CPU figure's denominator)
    errors: list[str] = []
    start = time.perf_counter()
    settle = min(0.5, spec["seconds"] / 4)  # the least start-up a window leaves out
    first_answers = [0]
    window = [float("inf"), float("inf")]  # [warm, stop], set when the first wave is over
    first_wave = [float("nan")]

    def first_answer() -> None:
        first_answers[0] += 1
        if first_answers[0] == spec["conc"]:
            now = time.perf_counter()
            first_wave[0] = now - start
            window[0] = max(now, start + settle)
            window[1] = window[0] + spec["seconds"]

    async def worker(i: int) -> None:
        conn = Conn(spec["url"])
        await conn.open()
        content = wl.NewContent(text, seed=i)
        own = keys[i % len(keys)] if keys else f"conn{i}"
        think = spec.get("think", 0.0)
        if think:  # spread the connections' calls over the think time, as agents would be
            await asyncio.sleep(random.uniform(0, think))
        first = True
        try:
            while (t := time.perf_counter()) < window[1]:
                n = next(counter)
                key = (keys[n % len(keys)] if keys else f"s{n}") if fresh else own
                try:
                    status, answer = await conn.call(
                        _path(spec, key), template.body(content.take(spec["size"]))
                    )
                except (OSError, asyncio.IncompleteReadError) as exc:
                    # A server that drops a connection (the peer does, under load) is
                    # an error on its row, not the end of the whole bench; reconnect.
                    errors.append(f"connection: {exc!r}")
                    if first:  # the first wave is over for this connection too
                        first = False
                        first_answer()
                    conn.close()
                    await _reopen(conn)
                    continue
                done = time.perf_counter()
                if first:
                    first = False
                    first_answer()
                if status != 200:
                    errors.append(f"{status}: {answer[:300]!r}")
                    continue
                answered[0] += 1
                if window[0] <= t < window[1]:
                    lat.append(done - t)
                if start + settle <= done < start + settle + spec["seconds"]:
                    with_start.append(done - t)
                if think:
                    # Agents' tool runs vary; a fixed pause phase-locks the connections
                    # into bursts (docs/bench-history.md, "Why the pause is random").
                    await asyncio.sleep(think * random.uniform(0.5, 1.5))
        finally:
            conn.close()

    await asyncio.gather(*(worker(i) for i in range(spec["conc"])))
    lat.sort()
    with_start.sort()
    return {
        "calls": len(lat),
        "answered": answered[0],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "rps": len(lat) / spec["seconds"],
        "p50_ms": _pct(lat, 0.5),
        "p99_ms": _pct(lat, 0.99),
        "p99_with_start_ms": _pct(with_start, 0.99),
        "first_wave_s": first_wave[0],
        "body_kb": len(template.body(wl.NewContent(text, 0).take(spec["size"]))) / 1000,
    }


async def _growing(spec: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """Rollouts one after another, each ``turns`` calls long; latency by turn."""
    text = wl.corpus()
    conn = Conn(spec["url"])
    await conn.open()
    by_turn: list[list[float]] = [[] for _ in range(spec["turns"])]
    cpu_by_turn: list[list[float]] = [[] for _ in range(spec["turns"])]
    sizes = [0] * spec["turns"]
    errors: list[str] = []
    calls = 0
    # A seed per rollout (``seed`` onward), so a target run one rollout at a time gets the
    # same contents as one run all at once.
    for r, key in enumerate(keys, start=spec.get("seed", 0)):
        content = wl.NewContent(text, seed=r)
        results: list[str] = []
        for turn in range(spec["turns"]):
            results.append(content.take(spec["size"]))
            body = wl.growing_body(spec["stream"], results, spec["workload"])
            sizes[turn] = len(body)
            t, cpu = time.perf_counter(), cpu_s(spec["pids"])
            status, answer = await conn.call(_path(spec, key), body)
            if status != 200:
                errors.append(f"{status}: {answer[:300]!r}")
                continue
            by_turn[turn].append(time.perf_counter() - t)
            cpu_by_turn[turn].append(cpu_s(spec["pids"]) - cpu)
            calls += 1
    conn.close()
    return {
        "calls": calls,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "answered": calls,
        "turns": [
            {
                "turn": i + 1,
                "body_kb": sizes[i] / 1000,
                "p50_ms": 1000 * statistics.median(xs),
                "cpu_ms": 1000 * statistics.mean(cpu_by_turn[i]),
                # every call's, in rollout order (the history section fits its slope)
                "cpu_calls_ms": [1000 * c for c in cpu_by_turn[i]],
            }
            for i, xs in enumerate(by_turn)
            if xs
        ],
    }


def load(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the load ``spec`` describes (see bench/gateway.py ``run_load``)."""
    keys = [k for k in Path(spec["keys"]).read_text().split() if k]
    if spec["case"] == "grow":
        return uvloop.run(_growing(spec, keys))
    return uvloop.run(_closed_loop(spec, keys))
