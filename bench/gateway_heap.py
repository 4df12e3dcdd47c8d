"""What the gateway leaves for the cyclic GC per call, and what one store group costs.

Wall-clock latency on a shared machine is noise; these figures are not. An in-process
:class:`~openforge.gateway.server.Gateway` (scripted instant engine, SQLite store) serves
``--calls`` Chat Completions calls spread over ``--rollouts`` rollout keys, and the
script reports:

* ``tracked/call`` — growth of ``len(gc.get_objects())`` per call, after a full collection
  at both ends: the objects every later gen-2 collection has to traverse;
* ``ints/call`` — ints held in GC-tracked lists per call (a list of token ids is walked
  element by element on every collection that reaches it);
* ``gc.collect ms`` — one full collection of the heap the calls left, frozen objects
  unfrozen first, the start-up heap included since session 22 (median of 7);
* ``gen-N runs``/``max ms`` for each generation, ``pauses >= 2 ms``, ``GC ms/call``:
  the collections CPython ran by itself while serving (gc.callbacks; times are CPU work,
  so they carry the machine's noise, counts do not);
* ``stmts/group`` and ``writes/group`` — SQLite statements the writer runs per group
  commit and writes it commits in one, so ``stmts/write``: each statement hands the GIL
  away and must win it back from a busy event loop (up to the 5 ms switch interval).

Two workloads: ``bench`` sends ``bench/gateway.py``'s body (the same system + user
message on every call), ``agent`` grows each rollout's conversation by a reply and a
~160-token tool result per call, as a harness does. The same measurement runs on the
working tree and on a baseline revision (``git archive`` into a temp dir), each in its
own process, printed side by side.

    .venv/bin/python bench/gateway_heap.py [--quick] [--baseline REV]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from openforge.models.registry import DEFAULT_MODEL, models_dir

ROOT = Path(__file__).resolve().parent.parent
MODEL = os.environ.get("OPENFORGE_BENCH_MODEL") or str(models_dir() / DEFAULT_MODEL)
ANSWER = "The answer is forty-two, computed from the six by seven table above."
SYSTEM = "You are a careful coding agent. " * 120
# The commit before the heap and group-commit work (override with --baseline).
BASELINE = "44edb3a"


def _messages(workload: str, rollout: int, turn: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is six times seven?"},
    ]
    if workload == "agent":
        for j in range(turn):
            output = " ".join(f"line {rollout}.{j}.{k}: ok" for k in range(20))
            msgs.append({"role": "assistant", "content": ANSWER})
            msgs.append({"role": "user", "content": f"Tool output:\n{output}"})
    return msgs


def _ints_in_lists(objs: list[Any]) -> int:
    return sum(len(o) for o in objs if type(o) is list and o and all(type(x) is int for x in o[:4]))


def _heap() -> list[object]:
    """Every object the GC tracks, after a full collection. A running gateway freezes
    what survives each collection (gateway/cyclic_gc.py) and ``gc.get_objects`` leaves
    frozen objects out, so everything is unfrozen first (the start-up heap too, on both
    sides)."""
    gc.unfreeze()
    gc.collect()
    gc.unfreeze()
    return gc.get_objects()


async def _measure(workload: str, calls: int, rollouts: int, conc: int) -> dict[str, Any]:
    import httpx

    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    tmp = Path(tempfile.mkdtemp(prefix="openforge-heap-"))
    script = tmp / "s.jsonl"
    script.write_text(json.dumps({"text": ANSWER}) + "\n")
    engine = ScriptedEngine.for_model(script, MODEL)
    async with Gateway(engine, SqliteStore(tmp / "s.db"), model=MODEL) as gw:
        keys = [(await gw.store.create_rollout()).key for _ in range(rollouts)]
        turns = [0] * rollouts
        stmts: Counter[str] = Counter()
        store: Any = gw.store
        conn = store._writer_conn
        # Count groups where they commit: the writer's _commit now (a group from its
        # thread or one row inline on the loop), run_group or the store's _run_group in
        # older revisions (each looked up on the instance, so the wrapper sees every group).
        owner = store._writer if hasattr(store, "_writer") else store
        name = next(n for n in ("_commit", "run_group", "_run_group") if hasattr(owner, n))
        inner = getattr(owner, name)
        sizes: list[int] = []
        started = [0.0]
        collections: dict[int, list[float]] = {0: [], 1: [], 2: []}

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                collections[info["generation"]].append(1000 * (time.perf_counter() - started[0]))

        def counted(*args: Any) -> Any:
            sizes.append(len(args[-1]))
            return inner(*args)

        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as client:

            async def one(r: int) -> None:
                body = {"model": "m", "messages": _messages(workload, r, turns[r])}
                turns[r] += 1
                headers = {"authorization": f"Bearer {keys[r]}"}
                resp = await client.post("/v1/chat/completions", json=body, headers=headers)
                resp.raise_for_status()

            # One pool of workers for the whole run, so the client's own tasks are no
            # part of the heap's growth.
            todo: asyncio.Queue[int | None] = asyncio.Queue()

            async def worker() -> None:
                while (r := await todo.get()) is not None:
                    await one(r)
                    todo.task_done()

            workers = [asyncio.create_task(worker()) for _ in range(conc)]

            async def run(n: int, start: int) -> None:
                for i in range(n):
                    todo.put_nowait((start + i) % rollouts)
                await todo.join()

            await run(rollouts, 0)  # every rollout has state and a history
            before = _heap()
            n0, types0, ints0 = len(before), Counter(type(o).__name__ for o in before), 0
            ints0 = _ints_in_lists(before)
            del before
            conn.set_trace_callback(lambda sql: stmts.update([sql.split(None, 1)[0].upper()]))
            setattr(owner, name, counted)
            gc.callbacks.append(on_gc)
            await run(calls, rollouts)
            gc.callbacks.remove(on_gc)
            setattr(owner, name, inner)
            conn.set_trace_callback(None)
            for _ in workers:
                todo.put_nowait(None)
            after = _heap()
            n1, types1 = len(after), Counter(type(o).__name__ for o in after)
            ints1 = _ints_in_lists(after)
            del after
            pauses = []
            for _ in range(7):
                gc.unfreeze()
                t = time.perf_counter()
                gc.collect()
                pauses.append(1000 * (time.perf_counter() - t))
            await asyncio.gather(*workers)
    growth = types1 - types0
    groups = len(sizes) or 1
    writes = sum(sizes)
    return {
        "tracked_per_call": (n1 - n0) / calls,
        "ints_per_call": (ints1 - ints0) / calls,
        "gc_ms": statistics.median(pauses),
        "stmts_per_group": sum(stmts.values()) / groups,
        "writes_per_group": writes / groups,
        "stmts_per_write": sum(stmts.values()) / max(writes, 1),
        "gen2_n": len(collections[2]),
        "gen2_max_ms": max(collections[2], default=0.0),
        "gen1_max_ms": max(collections[1], default=0.0),
        "gen0_n": len(collections[0]),
        "gen0_max_ms": max(collections[0], default=0.0),
        "gc_ms_per_call": sum(map(sum, collections.values())) / calls,
        "gen1_n": len(collections[1]),
        "over_2ms": sum(ms >= 2 for ms in collections[1] + collections[2]),
        "top": [f"{k} {v / calls:.1f}" for k, v in growth.most_common(6)],
    }


def _side(src: str, workload: str, calls: int, rollouts: int, conc: int) -> None:
    sys.path.insert(0, src)
    import uvloop

    import openforge

    assert Path(openforge.__file__).is_relative_to(src), openforge.__file__
    result = uvloop.run(_measure(workload, calls, rollouts, conc))
    print(json.dumps(result), flush=True)


def _run_side(src: Path, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--side", str(src), "--workload", workload]
    argv += ["--calls", str(args.calls), "--rollouts", str(args.rollouts)]
    argv += ["--conc", str(args.conc)]
    # On PYTHONPATH, not only sys.path: this module imports openforge before _side runs.
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,000 calls over 64 rollouts")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rollouts", type=int, default=256)
    ap.add_argument("--conc", type=int, default=64, help="calls in flight")
    ap.add_argument("--baseline", default=BASELINE, help="git revision to compare against")
    ap.add_argument("--workload", choices=("bench", "agent", "both"), default="both")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        _side(args.side, args.workload, args.calls, args.rollouts, args.conc)
        return
    if args.quick:
        args.calls, args.rollouts = 1000, 64
    workloads = ["bench", "agent"] if args.workload == "both" else [args.workload]
    with tempfile.TemporaryDirectory(prefix="openforge-base-") as base:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.baseline, "src"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        print(f"{args.calls} calls over {args.rollouts} rollouts, {args.conc} in flight")
        head = f"{'workload':9} {'figure':16} {args.baseline:>12} {'this tree':>12}"
        print(head + "\n" + "-" * len(head))
        for workload in workloads:
            old = _run_side(Path(base) / "src", workload, args)
            new = _run_side(ROOT / "src", workload, args)
            for key, label in (
                ("tracked_per_call", "tracked/call"),
                ("ints_per_call", "ints/call"),
                ("gc_ms", "gc.collect ms"),
                ("gen2_n", "gen-2 runs"),
                ("gen2_max_ms", "gen-2 max ms"),
                ("gen1_n", "gen-1 runs"),
                ("gen1_max_ms", "gen-1 max ms"),
                ("gen0_n", "gen-0 runs"),
                ("gen0_max_ms", "gen-0 max ms"),
                ("over_2ms", "pauses >= 2 ms"),
                ("gc_ms_per_call", "GC ms/call"),
                ("stmts_per_group", "stmts/group"),
                ("writes_per_group", "writes/group"),
                ("stmts_per_write", "stmts/write"),
            ):
                print(f"{workload:9} {label:16} {old[key]:12.2f} {new[key]:12.2f}")
            print(f"{workload:9} {'growth (base)':16} {', '.join(old['top'])}")
            print(f"{workload:9} {'growth (now)':16} {', '.join(new['top'])}")


if __name__ == "__main__":
    main()
