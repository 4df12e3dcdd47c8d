"""Screenshots from a real VLM rollout into training data and the built-in trainer.

Two rollouts of one group go through a real gateway serving the tiny Qwen2.5-VL with the
local engine (pixel values on CPU, sampled at temperature 1 with logprobs), the openai SDK
sending a new 1280x720 screenshot per call: two calls that keep every screenshot, then two
that drop the old ones (forks). From that store: samples list their images with
placeholder offsets (per-call by default for such rollouts), the veRL and SFT exports
carry the images, and the trainer runs forward/backward with pixel values — its logprobs
match the engine's recorded ones and one GRPO step changes the weights, the vision tower's
included.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from openforge.cli import app
from openforge.engines.local import LocalEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.rendering.tokenizer import load_tokenizer
from openforge.rendering.vision import IMAGE_PAD, VISION_END, VISION_START
from openforge.store.sqlite import SqliteStore
from openforge.traces.samples import Mode, Sample, TraceOptions
from openforge.traces.source import load_blobs, open_store, plan_store
from openforge.training.advantages import grpo_advantages
from openforge.training.config import TrainConfig
from openforge.training.teacher import SftSample, load_sft_images, load_sft_samples
from openforge.training.trainer import Trainer

MODEL = "tiny-qwen2.5-vl"
CALLS = 4
KEEP_ALL = 2  # calls that keep every screenshot; the rest keep only the newest
IMAGES_SHOWN = [1, 2, 1, 1]  # per call


def screenshot(seed: str) -> tuple[dict[str, Any], bytes]:
    noise = hashlib.shake_256(seed.encode()).digest(3 * 32 * 18)
    img = Image.frombytes("RGB", (32, 18), noise).resize((1280, 720))
    out = io.BytesIO()
    img.save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}, out.getvalue()


async def _rollout(gw: Gateway, name: str, reward: float) -> None:
    async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
        r = (await admin.post(f"{gw.admin_url}/rollouts", json={"group_id": "g"})).json()
        client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You operate a browser."}]
        async with client:
            for step in range(CALLS):
                part, _ = screenshot(f"{name}-{step}")
                text = {"type": "text", "text": f"Step {step}: what next?"}
                messages.append({"role": "user", "content": [text, part]})
                if step >= KEEP_ALL:
                    for m in messages[:-1]:
                        if m["role"] == "user" and isinstance(m["content"], list):
                            m["content"] = [p for p in m["content"] if p["type"] == "text"]
                answer = await client.chat.completions.create(
                    model="m", messages=messages, max_tokens=4, temperature=1.0, seed=step
                )
                messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        done = await admin.post(
            f"{gw.admin_url}/rollouts/{r['rollout_id']}/finish",
            json={"status": "completed", "reward": reward},
        )
        assert done.status_code == 200, done.text


async def _record(db: Path) -> None:
    engine = LocalEngine(MODEL, threads=1)
    store = SqliteStore(db)
    try:
        async with Gateway(engine, store, model=resolve_model(MODEL)) as gw:
            await _rollout(gw, "a", 1.0)
            await _rollout(gw, "b", 0.0)
    finally:
        await engine.close()


@dataclass
class Recorded:
    db: Path
    samples: list[Sample]
    images: dict[str, bytes]


async def _read(db: Path, mode: Mode) -> tuple[list[Sample], dict[str, bytes]]:
    source = open_store(db)
    try:
        plan = await plan_store(source, TraceOptions(mode=mode, require_reward=True))
        blobs = await load_blobs(source, (i.sha256 for s in plan.samples for i in s.images))
    finally:
        await source.close()
    return plan.samples, {k: b.data for k, b in blobs.items()}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    db = tmp_path_factory.mktemp("mm") / "store.db"
    asyncio.run(_record(db))
    samples, images = asyncio.run(_read(db, Mode.AUTO))
    yield Recorded(db, samples, images)


def _vision_ids() -> tuple[int, int, int]:
    tok = load_tokenizer(resolve_model(MODEL))
    ids = [tok.token_id(t) for t in (VISION_START, IMAGE_PAD, VISION_END)]
    assert None not in ids
    return ids[0] or 0, ids[1] or 0, ids[2] or 0


def _check_placeholders(ids: list[int], sample: Sample | SftSample) -> None:
    start, pad, end = _vision_ids()
    assert ids.count(start) == len(sample.images)
    for image in sample.images:
        t, h, w = image.grid_thw
        assert image.length == t * h * w // 4  # merge_size 2
        assert ids[image.offset - 1] == start and ids[image.offset + image.length] == end
        assert ids[image.offset : image.offset + image.length] == [pad] * image.length


def test_gui_rollouts_give_per_call_samples_with_their_images(recorded: Recorded) -> None:
    samples = recorded.samples
    assert len(samples) == 2 * CALLS
    assert {s.mode for s in samples} == {Mode.PER_CALL}  # auto: images → per call
    assert [len(s.images) for s in samples] == IMAGES_SHOWN * 2
    for s in samples:
        _check_placeholders(s.input_ids, s)
        assert s.image_processor["processor"] == "Qwen2VLImageProcessorPil"
        for image in s.images:
            assert hashlib.sha256(recorded.images[image.sha256]).hexdigest() == image.sha256
    # The first two calls show the same first screenshot: one blob.
    assert samples[0].images[0].sha256 == samples[1].images[0].sha256
    assert len(recorded.images) == 2 * CALLS


def test_merged_samples_keep_the_images_inside_them(recorded: Recorded) -> None:
    merged, _ = asyncio.run(_read(recorded.db, Mode.MERGED))
    # Calls 0-1 extend each other; 2 and 3 fork: 3 paths per rollout.
    assert [len(s.call_ids) for s in merged] == [2, 1, 1] * 2
    assert [len(s.images) for s in merged] == [2, 1, 1] * 2
    for s in merged:
        _check_placeholders(s.input_ids, s)


def test_verl_export_carries_images_per_row(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "verl.parquet"
    res = CliRunner().invoke(
        app,
        ["traces", "export", "--store", str(recorded.db), "--format", "verl", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "8 auto samples" in res.output
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(recorded.samples)
    start = _vision_ids()[0]
    for row, sample in zip(rows, recorded.samples, strict=True):
        assert row["input_ids"] == sample.input_ids
        assert len(row["images"]) == row["input_ids"].count(start) == len(sample.images)
        for image, digest, grid, ref in zip(
            row["images"], row["image_sha256"], row["image_grid_thw"], sample.images, strict=True
        ):
            assert hashlib.sha256(image["bytes"]).hexdigest() == digest == ref.sha256
            assert image["path"] is None  # veRL's {"bytes", "path"} image layout
            assert tuple(grid) == ref.grid_thw
            with Image.open(io.BytesIO(image["bytes"])) as img:
                assert img.size == (1280, 720)


def test_sft_export_writes_each_image_once(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    res = CliRunner().invoke(
        app, ["traces", "export", "--store", str(recorded.db), "--format", "sft", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    # Only rollout "a" was rewarded: its 4 calls.
    records = [json.loads(line) for line in out.read_text().splitlines()]
    tokens = [json.loads(line) for line in (tmp_path / "sft.tokens.jsonl").read_text().splitlines()]
    assert len(records) == len(tokens) == CALLS
    files = sorted((tmp_path / "sft.images").iterdir())
    assert len(files) == CALLS  # 4 screenshots, though calls re-sent them
    for rec, tok in zip(records, tokens, strict=True):
        parts = [p for m in rec["messages"] if isinstance(m["content"], list) for p in m["content"]]
        assert sum(p["type"] == "image" for p in parts) == len(rec["images"])
        assert not any(p["type"] == "image_url" for p in parts)
        for name, shown in zip(rec["images"], tok["images"], strict=True):
            data = (tmp_path / name).read_bytes()
            assert name.startswith("sft.images/") and name.endswith(".png")
            assert hashlib.sha256(data).hexdigest() == shown["sha256"]
        assert tok["image_processor"]["max_pixels"] == 50176
        start = _vision_ids()[0]
        assert tok["input_ids"].count(start) == len(tok["images"])
    assert [len(r["images"]) for r in records] == IMAGES_SHOWN
    # The SFT warm-up reads it back: calls 0-1 are one path, 2 and 3 forked; it trains
    # on them with the exported image files.
    paths = load_sft_samples(tmp_path / "sft.tokens.jsonl")
    images = load_sft_images(tmp_path / "sft.tokens.jsonl")
    assert [len(p.images) for p in paths] == [2, 1, 1] and len(images) == CALLS
    for p in paths:
        _check_placeholders(p.prompt_ids + p.response_ids, p)
    model = resolve_model(MODEL)
    trainer = Trainer(TrainConfig(model=str(model), threads=1), model, device="cpu")
    result = trainer.sft_step(paths, 1e-4, images)
    assert result.accepted and math.isfinite(result.metrics["sft_loss"])


def test_trainer_matches_engine_logprobs_and_updates_with_pixels(
    recorded: Recorded, tmp_path: Path
) -> None:
    model = resolve_model(MODEL)
    cfg = TrainConfig(model=str(model), learning_rate=1e-3, temperature=1.0, threads=1)
    trainer = Trainer(cfg, model, device="cpu")
    assert trainer.vision is not None
    samples, images = recorded.samples, recorded.images
    mine = trainer.token_logprobs(samples, images)
    diffs = [
        abs(a - b)
        for s, row in zip(samples, mine, strict=True)
        for a, b in zip(row, s.logprobs, strict=False)
    ]
    print(f"trainer vs engine logprobs over {len(diffs)} tokens: max |diff| {max(diffs):.2e}")
    assert len(diffs) == sum(s.trained_tokens for s in samples) > 0
    assert max(diffs) < 1e-3
    # Missing image bytes are an error, never a silent text-only forward.
    with pytest.raises(ValueError, match="bytes are missing"):
        trainer.token_logprobs(samples[:1], {})
    visual = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "visual" in n}
    text = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lm_head" in n}
    assert visual and text
    adv = grpo_advantages((s.group_id or "", s.rollout_id, s.reward or 0.0) for s in samples)
    result = trainer.train_step(samples, adv.advantages, images)
    assert result.accepted, result.reason
    assert math.isfinite(result.metrics["loss"]) and result.metrics["micro_batches"] == len(samples)
    mismatch = result.metrics["mismatch_abs_logprob"]
    print(f"GRPO step: loss {result.metrics['loss']:.4f}, mismatch {mismatch:.2e}")
    assert mismatch < 1e-3
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(params[n], v) for n, v in visual.items())  # through the pixels
    assert any(not torch.equal(params[n], v) for n, v in text.items())
    # The new weights form a complete VLM directory the local engine takes as an update.
    exported = trainer.export_weights(tmp_path / "v1")
    assert (exported / "preprocessor_config.json").is_file()
    changed = {n: params[n].detach().clone() for n in [*visual, *text]}
    asyncio.run(_load_into_engine(exported, changed))


async def _load_into_engine(weights: Path, expected: dict[str, torch.Tensor]) -> None:
    engine = LocalEngine(MODEL, threads=1)
    try:
        await engine.update_weights(str(weights), "1")
        assert engine.info().weight_version == "1"
        state = engine.model.state_dict()
        for name, tensor in expected.items():  # the trained weights, under the module's names
            assert torch.equal(state[name], tensor), name
    finally:
        await engine.close()


def test_train_layers_freezes_the_vision_tower_too() -> None:
    model = resolve_model(MODEL)
    cfg = TrainConfig(model=str(model), train_layers=1, threads=1)
    trainer = Trainer(cfg, model, device="cpu")
    assert trainer.params and not any("visual" in n for n in trainer.params)
    assert all(".layers.1." in n or n.endswith("norm.weight") for n in trainer.params)
