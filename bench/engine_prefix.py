"""The local engine's prefix cache: time to first token for 8 concurrent agent first calls.

Each prompt is the claw agent's system prompt and tool list (~480 tokens, as the gateway
renders them for SmolLM2) followed by a different claw-mini instruction. One call runs
first and finishes, so with the cache on its tokens are kept; then 8 calls arrive together.
The baseline is the same engine with ``prefix_cache_tokens=0``, in the same run.

    .venv/bin/python bench/engine_prefix.py [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from openforge.conversation import SamplingParams
from openforge.engines.base import EngineRequest
from openforge.engines.local import LocalEngine
from openforge.guest.claw_agent import SYSTEM_PROMPT, TOOLS
from openforge.suites import load_tasks


def prompts(engine: LocalEngine, n: int) -> list[list[int]]:
    """``n + 1`` ChatML prompts sharing the claw system turn, each with its own task."""
    tools = "\n".join(json.dumps(t["function"]) for t in TOOLS)
    system = (
        f"<|im_start|>system\n{SYSTEM_PROMPT}\n\n# Tools\n<tools>\n{tools}\n</tools><|im_end|>\n"
    )
    tasks = load_tasks("claw-mini").tasks[: n + 1]
    return [
        list(engine.tokenizer.encode(
            f"{system}<|im_start|>user\n{t.instruction}<|im_end|>\n<|im_start|>assistant\n"
        ))
        for t in tasks
    ]  # fmt: skip


async def first_token_s(engine: LocalEngine, prompt: list[int]) -> float:
    """Seconds to the first token; the stream is read to its end (a finished sequence is
    what the cache keeps; one dropped early is cancelled)."""
    started = time.perf_counter()
    first: float | None = None
    params = SamplingParams(max_tokens=4, temperature=0.0)
    async for _ in engine.generate(EngineRequest(prompt_ids=prompt, params=params)):
        if first is None:
            first = time.perf_counter() - started
    if first is None:
        raise RuntimeError("no token")
    return first


async def one_round(cache_tokens: int, n: int, threads: int) -> tuple[float, float, int]:
    engine = LocalEngine("smollm2-135m", threads=threads, prefix_cache_tokens=cache_tokens)
    try:
        ps = prompts(engine, n)
        await first_token_s(engine, ps[0])  # finishes: its tokens are cached when the cache is on
        await asyncio.sleep(0.2)
        ttfts = await asyncio.gather(*(first_token_s(engine, p) for p in ps[1:]))
        return statistics.median(ttfts), max(ttfts), len(ps[1])
    finally:
        await engine.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 round instead of 2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--concurrent", type=int, default=8)
    args = ap.parse_args()
    rounds = 1 if args.quick else 2
    best: dict[str, tuple[float, float, int]] = {}
    for _ in range(rounds):  # interleaved: load bursts on a shared machine hit both sides
        for name, tokens in (("no prefix cache (baseline)", 0), ("prefix cache", 8192)):
            got = asyncio.run(one_round(tokens, args.concurrent, args.threads))
            best[name] = min(best.get(name, got), got)
    length = next(iter(best.values()))[2]
    print(f"{args.concurrent} concurrent first calls of ~{length} prompt tokens, "
          f"{args.threads} thread(s), best of {rounds}")  # fmt: skip
    print(f"{'':28}{'TTFT p50 s':>11}{'max s':>8}")
    for name, (p50, worst, _) in best.items():
        print(f"{name:28}{p50:>11.2f}{worst:>8.2f}")


if __name__ == "__main__":
    main()
