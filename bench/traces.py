"""Benchmark: assembling rollout graphs and exporting samples, beside a naive baseline.

Figures (one core, this process):
- graph assembly of N rollouts of 8 calls (a linear agent with one SDK retry and, in every
  fourth rollout, a compaction fork): rollouts/s for ``build_graph`` (prefix look-ups of
  packed ids) and for a naive O(n²) comparison of id lists, measured in the same run;
- planning merged samples (as a library caller, and with the cyclic GC paused as the
  ``traces export`` command runs it) and writing the veRL parquet for all of them
  (``export.write_verl``, beside pyarrow columns built from Python lists with
  ``write_table`` defaults, timed on a tenth): rollouts/s;
- the merge compression ratio (tokens in per_call form / tokens in merged form) on a
  32-turn synthetic agent.

``--quick`` uses 1,000 rollouts instead of 10,000.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import numpy as np

from openforge.store.schemas import (
    CallRecord,
    CallStatus,
    decode_ids,
    decode_logprobs,
    encode_ids,
    encode_logprobs,
)
from openforge.traces.export import write_verl
from openforge.traces.graph import build_graph
from openforge.traces.samples import Mode, Sample, TraceOptions, plan_rollout
from openforge.traces.synthetic import Spec, make_calls, make_rollout

SYSTEM = 1500  # tokens of system prompt + tools, shared by every rollout
OBS, OUT = 150, 80  # tokens per observation and per answer


def _agent(
    rid: str, turns: int, rng: np.random.Generator, system: list[int], retry: bool, fork: bool
) -> list[CallRecord]:
    def toks(n: int) -> list[int]:
        return [int(x) for x in rng.integers(0, 49000, n)]

    specs = [Spec(None, system + toks(OBS), toks(OUT))]
    for t in range(1, turns):
        if fork and t == turns // 2:
            specs.append(Spec(None, system + toks(OBS), toks(OUT)))  # compacted history
        else:
            specs.append(Spec(len(specs) - 1, toks(OBS), toks(OUT)))
    if retry:  # the SDK re-sent turn 1 after an engine error
        specs.insert(2, Spec(None, [], [], status=CallStatus.ENGINE_ERROR, repeat_of=1))
        specs[3].parent = 1
        specs = specs[:turns]
    calls = make_calls(rid, specs)
    for c in calls:  # as read back from a store: fresh int objects, float32 logprobs
        c.prompt_ids = decode_ids(encode_ids(c.prompt_ids))
        c.output_ids = decode_ids(encode_ids(c.output_ids))
        c.output_logprobs = decode_logprobs(encode_logprobs(c.output_logprobs))
    return calls


def naive_parents(calls: list[CallRecord]) -> dict[str, str | None]:
    """The obvious way: compare every call's prompt with every other call's prompt + output."""
    out: dict[str, str | None] = {}
    for c in calls:
        best: CallRecord | None = None
        for p in calls:
            if p is c or p.status != CallStatus.OK:
                continue
            full = p.prompt_ids + p.output_ids
            if (
                len(full) <= len(c.prompt_ids)
                and c.prompt_ids[: len(full)] == full
                and (best is None or len(full) > len(best.prompt_ids) + len(best.output_ids))
            ):
                best = p
        out[c.id] = best.id if best else None
    return out


def naive_verl(samples: list[Sample], out: Path) -> None:
    """The obvious way: pyarrow columns from Python lists, ``write_table`` defaults."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "prompts": [s.prompt_ids for s in samples],
                "responses": [s.response_ids for s in samples],
                "input_ids": [s.prompt_ids + s.response_ids for s in samples],
                "attention_mask": [[1] * len(s.input_ids) for s in samples],
                "position_ids": [list(range(len(s.input_ids))) for s in samples],
                "response_mask": [s.loss_mask for s in samples],
                "rollout_log_probs": [s.logprobs for s in samples],
                "token_level_scores": [
                    [0.0] * (len(s.response_ids) - 1) + [s.reward or 0.0] for s in samples
                ],
                "uid": [s.group_id for s in samples],
            }
        ),
        out,
    )


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:10,.0f}/s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 rollouts instead of 10,000")
    args = ap.parse_args()
    n = 1_000 if args.quick else 10_000
    rng = np.random.default_rng(0)
    system = [int(x) for x in rng.integers(0, 49000, SYSTEM)]
    # A pool of distinct rollouts, cycled: keeps memory small; nothing is cached across them.
    pool = [
        (
            make_rollout(f"r{i}", reward=float(i % 2), group=f"g{i // 8}"),
            _agent(f"r{i}", 8, rng, system, retry=True, fork=i % 4 == 0),
        )
        for i in range(min(n, 400))
    ]
    work = [pool[i % len(pool)] for i in range(n)]
    calls_total = sum(len(c) for _, c in work)
    tokens = sum(len(c.prompt_ids) + len(c.output_ids) for _, cs in work for c in cs)
    print(f"{n:,} rollouts, {calls_total:,} calls, {tokens / calls_total:,.0f} tokens per call")

    t = time.perf_counter()
    graphs = [build_graph(cs) for _, cs in work]
    fast = time.perf_counter() - t
    m = max(1, n // 10)  # the baseline is slow: time a tenth and scale
    t = time.perf_counter()
    naive = [naive_parents(cs) for _, cs in work[:m]]
    slow = (time.perf_counter() - t) * n / m
    for g, ref in zip(graphs[:m], naive, strict=True):  # same parents for the kept calls
        assert all(
            ref[nd.call.id] == (nd.parent.call.id if nd.parent else None)
            for nd in g.nodes
            if nd.call.status == CallStatus.OK
        )
    print(
        f"graph assembly  openforge {_rate(n, fast)}   naive O(n²) lists {_rate(n, slow)}"
        f"   speed-up {slow / fast:.1f}x"
    )

    t = time.perf_counter()
    samples = [s for r, cs in work for s in plan_rollout(r, cs).samples]
    planned = time.perf_counter() - t
    del samples
    gc.disable()  # as `openforge traces export` plans: no collector walking the id lists
    t = time.perf_counter()
    samples = [s for r, cs in work for s in plan_rollout(r, cs).samples]
    planned_cli = time.perf_counter() - t
    gc.enable()
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        write_verl(samples, Path(d) / "train.parquet")
        exported = time.perf_counter() - t
        t = time.perf_counter()
        naive_verl(samples[: len(samples) // 10], Path(d) / "naive.parquet")
        naive_s = (time.perf_counter() - t) * 10
    print(
        f"plan merged     {_rate(n, planned)}   gc paused (CLI) {_rate(n, planned_cli)}"
        f"   ({len(samples):,} samples)"
    )
    print(
        f"veRL parquet    openforge {_rate(n, exported)}   naive pyarrow lists {_rate(n, naive_s)}"
        f"   speed-up {naive_s / exported:.1f}x"
    )
    print(
        f"end to end      library {_rate(n, planned + exported)}"
        f"   CLI {_rate(n, planned_cli + exported)}"
    )

    r32 = make_rollout("long")
    calls32 = _agent("long", 32, rng, system, retry=False, fork=False)
    per_call = plan_rollout(r32, calls32, TraceOptions(mode=Mode.PER_CALL)).counts.tokens
    merged = plan_rollout(r32, calls32, TraceOptions(mode=Mode.MERGED)).counts.tokens
    t = time.perf_counter()
    for _ in range(10):
        build_graph(calls32)
    fast32 = (time.perf_counter() - t) / 10
    t = time.perf_counter()
    naive_parents(calls32)
    slow32 = time.perf_counter() - t
    print(
        f"32-turn graph   openforge {_rate(1, fast32)}   naive O(n²) lists {_rate(1, slow32)}"
        f"   speed-up {slow32 / fast32:.1f}x"
    )
    print(
        f"32-turn agent   per_call {per_call:,} tokens   merged {merged:,} tokens"
        f"   compression {per_call / merged:.1f}x"
    )


if __name__ == "__main__":
    main()
