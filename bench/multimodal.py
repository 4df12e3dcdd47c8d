"""What a screenshot costs the gateway per call, and what storing it once saves.

An in-process gateway (scripted engine, SQLite store) renders for the tiny Qwen2.5-VL
model (SmolLM2's tokenizer plus the vision tokens, the real Qwen2-VL PIL image processor)
and serves a 30-call GUI rollout twice, through one HTTP client:

* ``text``   — each call appends a text observation (no images);
* ``images`` — each call appends a new 1280x720 PNG screenshot and re-sends every earlier
               one (a harness that keeps its screenshots): the gateway decodes and checks
               each image, hashes it, expands its placeholders (the processor's grid,
               cached by digest) and stores new images once.

Printed: per-call latency (p50, mean) of both and the difference per screenshot call;
bytes stored for the images (blobs) against what storing every image of every call would
take; the store file size of both runs. Then the training data of the screenshot run:
planning its samples (per call, the default for rollouts with images) and reading their
images from the store, and the veRL parquet and SFT exports (time and size: the parquet
holds each row's images inline, as veRL's image column does; SFT writes each image once).

    .venv/bin/python bench/multimodal.py [--calls 30]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import io
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from PIL import Image

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.schemas import RolloutStatus
from openforge.store.sqlite import SqliteStore
from openforge.traces.export import image_digests, sft_image_digests, write_sft, write_verl
from openforge.traces.samples import TraceOptions
from openforge.traces.source import load_blobs, open_store, plan_store

_JSON = {"content-type": "application/json"}


def screenshot(step: int) -> bytes:
    """A 1280x720 PNG that compresses like a screen (flat areas, some detail)."""
    noise = hashlib.shake_256(str(step).encode()).digest(3 * 160 * 90)
    img = Image.frombytes("RGB", (160, 90), noise).resize((1280, 720), Image.Resampling.NEAREST)
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


async def run(calls: int, images: bool, tmp: Path) -> dict[str, Any]:
    model = resolve_model("tiny-qwen2.5-vl")
    script = tmp / "script.jsonl"
    script.write_text('{"text": "clicked the button"}\n')
    store = SqliteStore(tmp / f"store-{images}.db")
    engine = ScriptedEngine.for_model(script, model)
    shots = [screenshot(i) for i in range(calls)]
    latencies: list[float] = []
    async with Gateway(engine, store, model=model, allow_anonymous=True) as gw:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Operate the browser."}]
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as client:
            for i in range(calls):
                content: Any = f"Step {i}: the page shows a form with 12 fields."
                if images:
                    url = "data:image/png;base64," + base64.b64encode(shots[i]).decode()
                    content = [
                        {"type": "text", "text": content},
                        {"type": "image_url", "image_url": {"url": url}},
                    ]
                messages.append({"role": "user", "content": content})
                t0 = time.perf_counter()
                body = orjson.dumps({"model": "m", "messages": messages})  # as harnesses send it
                r = await client.post("/v1/chat/completions", content=body, headers=_JSON)
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                messages.append(r.json()["choices"][0]["message"])
        blob_bytes = await store.blob_bytes()
    every = sum(len(shots[j]) for i in range(calls) for j in range(i + 1)) if images else 0
    return {
        "p50_ms": statistics.median(latencies) * 1e3,
        "mean_ms": statistics.fmean(latencies) * 1e3,
        "blob_bytes": blob_bytes,
        "every_image_every_call": every,
        "file_bytes": sum(p.stat().st_size for p in tmp.glob(f"store-{images}.db*")),
        "shot_bytes": sum(len(s) for s in shots) / calls,
    }


async def training_data(tmp: Path) -> dict[str, float]:
    """Plan the screenshot run's store and export it for veRL and SFT (timed)."""
    db = tmp / "store-True.db"
    store = SqliteStore(db)
    await store.finish_rollout((await store.rollouts())[0].id, RolloutStatus.COMPLETED, 1.0)
    await store.close()
    t0 = time.perf_counter()
    source = open_store(db)
    plan = await plan_store(source, TraceOptions(require_reward=True))
    blobs = await load_blobs(source, image_digests(plan.samples))
    sft_blobs = await load_blobs(source, sft_image_digests(plan.plans))
    await source.close()
    plan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_verl(plan.samples, tmp / "verl.parquet", blobs=blobs)
    verl_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    write_sft(plan.plans, tmp / "sft.jsonl", blobs=sft_blobs)
    sft_s = time.perf_counter() - t0
    sft_bytes = sum(p.stat().st_size for p in tmp.glob("sft*") if p.is_file())
    sft_bytes += sum(p.stat().st_size for p in (tmp / "sft.images").iterdir())
    return {
        "samples": len(plan.samples),
        "images": sum(len(s.images) for s in plan.samples),
        "plan_s": plan_s,
        "verl_s": verl_s,
        "verl_bytes": (tmp / "verl.parquet").stat().st_size,
        "sft_s": sft_s,
        "sft_bytes": sft_bytes,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        warm = tmp / "warm"  # first calls load the tokenizer and processor
        warm.mkdir()
        await run(3, True, warm)
        text = await run(args.calls, False, tmp)
        shots = await run(args.calls, True, tmp)
        data = await training_data(tmp)
    n = args.calls
    print(f"{n}-call rollout, 1280x720 PNG screenshots (~{shots['shot_bytes'] / 1e3:.0f} KB each)")
    print(f"  text only        p50 {text['p50_ms']:7.1f} ms   mean {text['mean_ms']:7.1f} ms")
    print(f"  with screenshots p50 {shots['p50_ms']:7.1f} ms   mean {shots['mean_ms']:7.1f} ms")
    extra = shots["mean_ms"] - text["mean_ms"]
    avg_images = (n + 1) / 2
    print(
        f"  extra per call   {extra:7.1f} ms (each call carries {avg_images:.1f} screenshots on "
        f"average, one new): {extra / avg_images:.1f} ms per screenshot sent"
    )
    print(
        f"  images stored    {shots['blob_bytes'] / 1e6:7.2f} MB once by sha256 vs "
        f"{shots['every_image_every_call'] / 1e6:.2f} MB storing every image every call "
        f"({shots['every_image_every_call'] / max(shots['blob_bytes'], 1):.1f}x)"
    )
    print(
        f"  store file       {shots['file_bytes'] / 1e6:7.2f} MB with screenshots, "
        f"{text['file_bytes'] / 1e6:.2f} MB text only ({shots['file_bytes'] / n / 1e3:.0f} KB/call)"
    )

    print(
        f"training data    {data['samples']:.0f} per-call samples showing {data['images']:.0f} "
        f"screenshots: plan + read images {data['plan_s'] * 1e3:.0f} ms"
    )
    print(
        f"  veRL parquet     {data['verl_s'] * 1e3:7.0f} ms, {data['verl_bytes'] / 1e6:.2f} MB "
        "(each row's images inline)"
    )
    print(
        f"  SFT JSONL+files  {data['sft_s'] * 1e3:7.0f} ms, {data['sft_bytes'] / 1e6:.2f} MB "
        "(each image once)"
    )


if __name__ == "__main__":
    asyncio.run(main())
