"""Gateway speed on agent traffic, through the vLLM engine client, beside rllm-model-gateway.

Every target runs in its own process pinned with ``taskset``: gateways (OpenForge, the
peer) on core 0; the instant vLLM-style engine server (bench/gateway_workload.py) and the
load generator on core 1. OpenForge is ``openforge gateway --engine vllm`` as users run
it, reaching the engine over HTTP. Each call carries new content (a fresh slice of source
code as a tool result), so nothing is answered from a cache of whole bodies.

Targets, one table row each:

* ``engine``  — the engine's own chat route, no gateway (the baseline of "added" latency);
* ``openforge`` — one rollout key per connection: each call is the same conversation with
  a new tool result (the first call of each connection renders the shared prefix once);
* ``of-fresh`` — a fresh rollout (key) per call: every call is a rollout's first;
* ``rllm``    — rllm-model-gateway (PyPI) in front of the engine, one session per
  connection (``/sessions/<id>/v1``), its log level at warning.

Columns: calls/s, latency p50/p99, added p50/p99 (minus the engine's at the same mode and
concurrency), ``cpu ms`` (the target process's CPU time per answered call, from /proc:
the figure least moved by other load on a shared machine), ``×rllm`` (calls/s over the
peer's) and the 1-minute load average when the run ended.

Sections: ``headline`` (the agent body: 6 KB system prompt, 10 tools, a tool call and a
3 KB result), ``recorded`` (the recorded Claude Code and Codex bodies plus a tool turn),
``sizes`` (cost per call as the new content grows: 1, 3, 10, 30 KB), ``history`` (one
rollout growing turn by turn: cost by history length), ``workers`` (``--workers N``
processes on one port), ``paired`` (with ``--compare``: this checkout against the other,
``--pairs`` times at each mode and concurrency, alternating which runs first; the paired
differences with their 95% intervals. On a shared 2-core machine the same code's CPU per
call moves 15-25% between runs, and the second gateway of a run tends to do better, so a
single before/after row cannot show a change of a few percent).

    .venv/bin/python bench/gateway.py [--quick] [--no-peer] [--only headline sizes ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway_workload as wl
from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = os.environ.get("OPENFORGE_BENCH_MODEL") or str(models_dir() / DEFAULT_MODEL)
TOKEN = "bench-admin-token"
SECTIONS = ("headline", "recorded", "sizes", "history", "workers", "paired")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds of ``pids`` and their children (workers) so far."""
    from gateway_load import cpu_s

    return cpu_s([*pids, *(c for p in pids for c in _children(p))])


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Target:
    name: str
    url: str
    pids: list[int]
    kind: str  # engine | openforge | rllm
    keys: list[str] = field(default_factory=list)
    store: str | None = None  # an OpenForge gateway's SQLite file under the run's tmp


# ---- processes --------------------------------------------------------------------


def _answer_ids() -> tuple[list[int], list[str]]:
    """The ids of ``ANSWER`` + end of turn under the model's tokenizer, and their texts."""
    from openforge.rendering import load_tokenizer

    tok = load_tokenizer(MODEL)
    end = tok.token_id("<|im_end|>")
    assert end is not None
    ids = [*tok.encode(wl.ANSWER), end]
    return ids, [tok.decode([i]) for i in ids]


def start_engine(procs: list[subprocess.Popen[bytes]], tmp: Path) -> str:
    ids, pieces = _answer_ids()
    spec = tmp / "answer.json"
    spec.write_text(json.dumps([ids, pieces]))
    port = _free_port()
    procs.append(
        subprocess.Popen(
            ["taskset", "-c", "1", sys.executable, __file__, "--serve-engine", str(port), str(spec)]
        )
    )
    _wait_port(port, procs[-1])
    return f"http://127.0.0.1:{port}"


def start_openforge(
    procs: list[subprocess.Popen[bytes]],
    tmp: Path,
    engine_url: str,
    workers: int = 1,
    src: Path | None = None,
    store: str | None = None,
) -> Target:
    """``openforge gateway --engine vllm`` pinned to core 0 (``workers`` > 1: cores
    0..workers-1), importing ``src`` (another checkout's sources) when given."""
    port = _free_port()
    cores = "0" if workers == 1 else f"0-{min(workers, os.cpu_count() or 1) - 1}"
    args = ["taskset", "-c", cores, str(Path(sys.executable).parent / "openforge"), "gateway"]
    args += ["--engine", "vllm", "--url", engine_url, "--model", MODEL, "--max-context", "131072"]
    args += ["--store", store or str(tmp / f"openforge-{port}.db"), "--port", str(port)]
    args += ["--admin-port", str(_free_port())]
    if workers > 1:
        args += ["--workers", str(workers)]
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": TOKEN}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    procs.append(subprocess.Popen(args, env=env, stderr=subprocess.DEVNULL))
    _wait_port(port, procs[-1])
    target = Target("openforge", f"http://127.0.0.1:{port}", [procs[-1].pid], "openforge")
    target.store = None if store else f"openforge-{port}.db"
    return target


def _store_mb(tmp: Path, name: str | None) -> float:
    """MB of a gateway's SQLite store with its WAL (nan when it has none here)."""
    if name is None:
        return float("nan")
    files = [tmp / name, tmp / f"{name}-wal"]
    return sum(f.stat().st_size for f in files if f.exists()) / 1e6


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def start_peer(procs: list[subprocess.Popen[bytes]], tmp: Path, engine_url: str) -> Target | None:
    exe = Path(sys.executable).parent / "rllm-model-gateway"
    if not exe.exists():
        print("# rllm-model-gateway is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return None
    port = _free_port()
    args = ["taskset", "-c", "0", str(exe), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--worker", engine_url + "/v1", "--db-path", str(tmp / "rllm.db")]
    args += ["--log-level", "warning"]
    procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    _wait_port(port, procs[-1], 60)
    return Target("rllm", f"http://127.0.0.1:{port}", [procs[-1].pid], "rllm")


_ROLLOUT_OF: dict[str, str] = {}  # each minted key's rollout id, to finish it by


def _admin_posts(target: Target, posts: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """POST each (path under ``/admin/rollouts``, body) to the gateway's admin API, 16
    at a time; their JSON answers in order."""
    admin = target.url.rsplit(":", 1)[0] + f":{_admin_port(target)}/admin/rollouts"

    async def main() -> list[Any]:
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
        ) as c:
            sem = asyncio.Semaphore(16)

            async def one(path: str, body: dict[str, Any]) -> Any:
                async with sem:
                    r = await c.post(admin + path, json=body)
                    r.raise_for_status()
                    return r.json()

            return list(await asyncio.gather(*(one(path, body) for path, body in posts)))

    return asyncio.run(main())


def mint(target: Target, n: int) -> list[str]:
    """``n`` rollout keys from the gateway's admin API (before any measured run)."""
    made = _admin_posts(target, [("", {})] * n)
    _ROLLOUT_OF.update((m["key"], m["rollout_id"]) for m in made)
    return [str(m["key"]) for m in made]


def finish(target: Target, keys: list[str]) -> None:
    """Finish the rollouts of ``keys`` (after a measured run), as an orchestrator finishes
    each graded rollout: a run's fresh rollouts (tens of thousands) are not left live in
    the gateway through every later run, as no training run leaves them."""
    done = {"status": "completed", "reward": 0.0}
    ids = [_ROLLOUT_OF.pop(k) for k in keys if k in _ROLLOUT_OF]
    _admin_posts(target, [(f"/{rollout}/finish", done) for rollout in ids])


def _fresh_keys(rps: float, seconds: float, conc: int) -> int:
    """Keys for a fresh rollout per call over a run as long as ``run_load`` makes it, at
    up to 1.3 times ``rps`` (when keys run out, calls reuse them: no longer first calls)."""
    return int(rps * seconds * (1 + conc / 128) * 1.3) + conc + 50


def _admin_port(target: Target) -> int:
    cmd = Path(f"/proc/{target.pids[0]}/cmdline").read_bytes().split(b"\0")
    return int(cmd[cmd.index(b"--admin-port") + 1])


# ---- runs ---------------------------------------------------------------------------


def run_load(
    target: Target, tmp: Path, *, workload: str = "agent", stream: bool = False, conc: int = 1,
    seconds: float = 5.0, case: str = "rollout", size: int = 3000, turns: int = 0,
    think: float = 0.0, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """One load run against ``target`` in a process pinned to core 1; its result line.

    Runs at 64 connections and more last longer (``seconds`` × (1 + conc/128)): a closed
    loop's latency there is its queue, seconds on a loaded machine, and the measured
    window must hold many of them."""
    seconds *= 1 + conc / 128
    keys_file = tmp / f"keys-{time.monotonic_ns()}.txt"
    keys_file.write_text("\n".join(target.keys))
    spec = {
        "url": target.url, "kind": target.kind, "workload": workload, "stream": stream,
        "conc": conc, "seconds": seconds, "case": case, "size": size, "turns": turns,
        "keys": str(keys_file), "think": think, "pids": target.pids, "seed": seed,
    }  # fmt: skip
    cpu0, t0 = _cpu_s(target.pids), time.monotonic()
    args = ["taskset", "-c", "1", sys.executable, __file__, "--load", json.dumps(spec)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"load on {target.name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu_ms"] = 1000 * (_cpu_s(target.pids) - cpu0) / max(1, result["answered"])
    result["wall_s"] = time.monotonic() - t0
    result["load"] = _loadavg()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (CI smoke)")
    ap.add_argument("--no-peer", action="store_true", help="skip rllm-model-gateway")
    # paired needs --compare, so it runs only when asked for
    ap.add_argument(
        "--only", nargs="+", choices=SECTIONS, default=[s for s in SECTIONS if s != "paired"]
    )
    ap.add_argument("--mode", choices=("json", "stream", "both"), default="both")
    ap.add_argument("--conc", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--seconds", type=float, help="measured seconds per run (6; quick 2.5)")
    ap.add_argument(
        "--compare",
        type=Path,
        metavar="CHECKOUT",
        help="also run another checkout's gateway (its src/) as 'before', e.g. a git "
        "worktree of an earlier commit: before/after in the same run",
    )
    ap.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="headline: pause after each call per connection (agents running tools); "
        "0: closed loop",
    )
    ap.add_argument("--workers", type=int, default=2, help="gateway processes (workers section)")
    ap.add_argument(
        "--rollouts", type=int, default=8, help="history section: growing rollouts per target"
    )
    ap.add_argument(
        "--history-workloads",
        nargs="+",
        choices=("agent", "claude", "codex"),
        default=["agent"],
        help="history section: the bodies that grow (agent: Chat; claude: Messages as "
        "Claude Code sends them; codex: Responses as Codex does)",
    )
    ap.add_argument(
        "--pairs", type=int, default=4, help="paired section: runs per mode and concurrency"
    )
    ap.add_argument(
        "--paired-case",
        choices=("rollout", "fresh"),
        default="rollout",
        help="paired section and --profile: a rollout per connection, or a fresh one per call",
    )
    ap.add_argument(
        "--profile",
        type=float,
        metavar="SECONDS",
        help="py-spy the OpenForge gateway under load (--conc[0], --mode) instead; with "
        "--only history, under growing rollouts (48 turns each, one at a time)",
    )
    ap.add_argument("--serve-engine", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--load", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_engine:
        ids, pieces = json.loads(Path(a.serve_engine[1]).read_text())
        wl.serve_engine(int(a.serve_engine[0]), ids, pieces)
        return
    if a.load:
        from gateway_load import load

        print(json.dumps(load(json.loads(a.load))), flush=True)
        return
    modes = {"json": (False,), "stream": (True,), "both": (False, True)}[a.mode]
    from gateway_report import Report

    seconds = a.seconds or (2.5 if a.quick else 6.0)
    tmp = Path(tempfile.mkdtemp(prefix="openforge-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    report = Report()
    try:
        engine_url = start_engine(procs, tmp)
        engine = Target("engine", engine_url, [procs[-1].pid], "engine")
        of = start_openforge(procs, tmp, engine_url)
        grow = bool(a.profile) and a.only == ["history"]
        # Growing rollouts, one after another: the warm-up's conc[0] keys, then about two
        # 48-turn rollouts per profiled second.
        fresh = bool(a.profile) and a.paired_case == "fresh" and not grow
        n = max(a.conc)
        if grow:
            n = a.conc[0] + int(a.profile) * 2 + 8
        elif fresh:  # a key per call: as many as ~1,000 calls a second would use
            n = a.conc[0] + int(1000 * (a.profile + 3))
        of.keys = mint(of, n)
        if a.profile:
            profile(of, tmp, modes[-1], a.conc[0], a.profile, "grow" if grow else a.paired_case)
            return
        peer = None if a.no_peer else start_peer(procs, tmp, engine_url)
        before = None
        if a.compare is not None:
            before = start_openforge(procs, tmp, engine_url, src=a.compare.resolve() / "src")
            before.name, before.keys = "before", mint(before, max(a.conc))
        ctx = Run(tmp, seconds, modes, tuple(a.conc), engine, of, peer, report, before)
        ctx.think = a.think_ms / 1000
        ctx.pairs = a.pairs
        ctx.rollouts = a.rollouts
        ctx.paired_case = a.paired_case
        ctx.history_workloads = tuple(a.history_workloads)
        if "paired" in a.only and before is None:
            raise SystemExit("bench/gateway.py: --only paired needs --compare CHECKOUT")
        for section in a.only:
            if section == "workers":
                ctx.workers(procs, engine_url, a.workers)
            else:
                getattr(ctx, section)()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def profile(
    of: Target, tmp: Path, stream: bool, conc: int, seconds: float, case: str = "rollout"
) -> None:
    """py-spy samples of the gateway while it serves the headline load, one rollout per
    connection (``case`` "rollout"), a fresh rollout per call ("fresh") or rollouts growing
    turn by turn as the history section sends them ("grow"); the top frames."""
    from gateway_report import profile_table

    keys, of.keys = of.keys, of.keys[:conc]
    run_load(of, tmp, stream=stream, conc=conc, seconds=2)  # warm: imports, shared caches
    spec = {"url": of.url, "kind": "openforge", "workload": "agent", "stream": stream,
            "conc": conc, "seconds": seconds + 2, "case": case,
            "size": 3000, "turns": 48, "pids": of.pids,
            "keys": str(tmp / "keys.txt")}  # fmt: skip
    (tmp / "keys.txt").write_text("\n".join(keys if case == "rollout" else keys[conc:]))
    args = ["taskset", "-c", "1", sys.executable, __file__, "--load", json.dumps(spec)]
    load = subprocess.Popen(args, stdout=subprocess.PIPE)
    out = tmp / "profile.txt"
    spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(of.pids[0])]
    spy += ["-d", str(int(seconds)), "-r", "250", "-f", "raw", "-o", str(out), "--nonblocking"]
    spy += ["--threads"]
    time.sleep(1)
    subprocess.run(spy, check=True, capture_output=True)
    print(load.communicate()[0].decode().strip())
    profile_table(out.read_text())


def merge_growing(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One target's growing rollouts (one run each) as one result: every call's CPU by turn."""
    turns: dict[int, dict[str, Any]] = {}
    for run in runs:
        for t in run["turns"]:
            into = turns.setdefault(t["turn"], {"turn": t["turn"], "body_kb": t["body_kb"],
                                                "ms": [], "cpu_calls_ms": []})  # fmt: skip
            into["ms"].append(t["p50_ms"])  # one call per turn and run: its latency
            into["cpu_calls_ms"] += t["cpu_calls_ms"]
    calls = sum(r["answered"] for r in runs)
    return {
        "turns": [turns[k] for k in sorted(turns)],
        "calls": calls,
        "errors": sum(r["errors"] for r in runs),
        "first_error": next((r["first_error"] for r in runs if r["first_error"]), None),
        "cpu_ms": sum(r["cpu_ms"] * r["answered"] for r in runs) / max(1, calls),
        "load": runs[-1]["load"],
    }


@dataclass
class Run:
    """The sections of one bench run, sharing its processes."""

    tmp: Path
    seconds: float
    modes: tuple[bool, ...]
    concs: tuple[int, ...]
    engine: Target
    of: Target
    peer: Target | None
    report: Any
    before: Target | None = None
    think: float = 0.0
    pairs: int = 4
    rollouts: int = 8
    paired_case: str = "rollout"
    history_workloads: tuple[str, ...] = ("agent",)

    def headline(self) -> None:
        """The agent body at every mode and concurrency, every target."""
        rows = {}
        for stream in self.modes:
            for conc in self.concs:
                kw = {"stream": stream, "conc": conc, "seconds": self.seconds, "think": self.think}
                rows[("engine", stream, conc)] = run_load(self.engine, self.tmp, **kw)
                of = rows[("openforge", stream, conc)] = run_load(self.of, self.tmp, **kw)
                fresh = Target("of-fresh", self.of.url, self.of.pids, "openforge")
                fresh.keys = mint(self.of, _fresh_keys(of["rps"], self.seconds, conc))
                rows[("of-fresh", stream, conc)] = run_load(fresh, self.tmp, case="fresh", **kw)
                finish(self.of, fresh.keys)
                if self.peer is not None:
                    rows[("rllm", stream, conc)] = run_load(self.peer, self.tmp, **kw)
                if self.before is not None:
                    b = rows[("before", stream, conc)] = run_load(self.before, self.tmp, **kw)
                    bf = Target("bef-fresh", self.before.url, self.before.pids, "openforge")
                    bf.keys = mint(self.before, _fresh_keys(b["rps"], self.seconds, conc))
                    rows[("bef-fresh", stream, conc)] = run_load(bf, self.tmp, case="fresh", **kw)
                    finish(self.before, bf.keys)
        self.report.headline(rows, self.modes, self.concs)

    def paired(self) -> None:
        """This checkout against ``--compare``'s, ``pairs`` times each, the order alternated."""
        assert self.before is not None
        pairs: dict[tuple[bool, int], list[tuple[dict[str, Any], ...]]] = {}
        for stream in self.modes:
            for conc in self.concs:
                kw = {"stream": stream, "conc": conc, "seconds": self.seconds, "think": self.think}
                for i in range(self.pairs):
                    engine = run_load(self.engine, self.tmp, **kw)
                    first, second = (self.of, self.before) if i % 2 == 0 else (self.before, self.of)
                    ran = {t.name: self._paired_run(t, kw) for t in (first, second)}
                    pairs.setdefault((stream, conc), []).append(
                        (engine, ran[self.of.name], ran[self.before.name])
                    )
        self.report.paired(pairs, self.paired_case)

    def _paired_run(self, target: Target, kw: dict[str, Any]) -> dict[str, Any]:
        if self.paired_case == "rollout":
            return run_load(target, self.tmp, **kw)
        # A fresh rollout per call: keys for as many calls as ~1,000 a second would make.
        fresh = Target(target.name, target.url, target.pids, target.kind)
        fresh.keys = mint(target, int(1000 * self.seconds * (1 + kw["conc"] / 128)))
        result = run_load(fresh, self.tmp, case="fresh", **kw)
        finish(target, fresh.keys)
        return result

    def recorded(self) -> None:
        """The recorded Claude Code and Codex bodies (OpenForge only: the peer is Chat-only)."""
        rows = {}
        targets = [t for t in (self.of, self.before) if t is not None]
        for workload in ("claude", "codex"):
            for stream in self.modes:
                for conc in (1, 64):
                    for t in targets:
                        rows[(workload, stream, conc, t.name)] = run_load(
                            t, self.tmp, workload=workload, stream=stream, conc=conc,
                            seconds=self.seconds,
                        )  # fmt: skip
        self.report.recorded(rows)

    def sizes(self) -> None:
        """Cost per call as the new content grows (c=1, JSON)."""
        rows = {}
        targets = [t for t in (self.engine, self.of, self.peer, self.before) if t is not None]
        for size in (1000, 3000, 10000, 30000):
            for t in targets:
                rows[(t.name, size)] = run_load(t, self.tmp, size=size, seconds=self.seconds)
        self.report.sizes(rows, [t.name for t in targets])

    def history(self) -> None:
        """Rollouts growing by an answer and a 3 KB result per call, one call at a time,
        for each of ``--history-workloads``.

        With ``--compare`` the two checkouts take turns, one rollout each (the same
        contents for both, the order alternated), so a change in the machine's speed
        during the section falls on both alike."""
        turns = 24 if self.seconds < 3 else 48
        targets = [t for t in (self.of, self.before) if t is not None]
        for workload in self.history_workloads:
            keys = {t.name: mint(t, self.rollouts) for t in targets}
            runs: dict[str, list[dict[str, Any]]] = {t.name: [] for t in targets}
            for r in range(self.rollouts):
                for target in targets if r % 2 == 0 else targets[::-1]:
                    target.keys = [keys[target.name][r]]
                    runs[target.name].append(
                        run_load(target, self.tmp, workload=workload, case="grow", turns=turns,
                                 seconds=self.seconds, seed=r)
                    )  # fmt: skip
            results = {}
            for target in targets:
                results[target.name] = merge_growing(runs[target.name])
                # The store's bytes on disk (this section's calls only under --only history).
                results[target.name]["store_mb"] = _store_mb(self.tmp, target.store)
            self.report.history(results, workload)

    def workers(self, procs: list[subprocess.Popen[bytes]], engine_url: str, n: int) -> None:
        """``n`` worker processes on one port against one, both on a PostgreSQL store
        (what workers need), c=64 and 256; the database server is not pinned."""
        from openforge.store.pgcluster import LocalCluster

        with LocalCluster.temporary() as cluster:
            one = start_openforge(procs, self.tmp, engine_url, store=cluster.create_database("one"))
            many = start_openforge(
                procs, self.tmp, engine_url, workers=n, store=cluster.create_database("many")
            )
            try:
                self._workers(one, many, n)
            finally:
                for p in procs[-2:]:
                    p.terminate()
                    p.wait()

    def _workers(self, one: Target, many: Target, n: int) -> None:
        rows = {}
        for target, label in ((one, "1 worker"), (many, f"{n} workers")):
            target.keys = mint(target, max(self.concs))
            for stream in self.modes:
                for conc in [c for c in self.concs if c > 1]:
                    rows[(label, stream, conc)] = run_load(
                        target, self.tmp, stream=stream, conc=conc, seconds=self.seconds
                    )
        self.report.workers(rows, n)


if __name__ == "__main__":
    main()
