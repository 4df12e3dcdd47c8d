"""Screenshots through the veRL bridge and export, checked against veRL 0.9.1's own code.

A real gateway serves the tiny Qwen2.5-VL (scripted answers: veRL only needs the ids) to
the openai SDK sending a screenshot per call; the bridge reads the rollout back through
the admin API, as the agent loop does, with its images from ``/admin/blobs``.

veRL's ``hf_processor`` cannot build a Qwen-VL processor here: transformers'
``Qwen2_5_VLProcessor`` insists on Qwen's video processor, which needs torchvision, and
no CPU torchvision wheel matching ``torch==2.13.0+cpu`` is on PyPI. So the check runs
veRL's own ``AgentLoopWorker._compute_multi_modal_inputs`` (the code that turns
``multi_modal_data`` back into pixel inputs for the rollout's ids) with the model's real
PIL image processor behind a processor that does what transformers' ``ProcessorMixin``
does around it for Qwen (pixel inputs from every image; each ``<|image_pad|>`` left in the
text expanded to its grid). It asserts the data layout veRL reads: the images in
placeholder order, the recorded processor settings passed on, grids equal to the ones
the gateway recorded, and as many pad ids in the rollout's ids as those grids need (the
M-RoPE positions veRL computes from them then line up).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import io
import types
import warnings
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest
from PIL import Image

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.integrations.verl.convert import (
    VERL_VERSION,
    call_from_json,
    output_fields,
    rollout_from_json,
    samples_of,
)
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore
from openforge.traces.export import image_digests, write_verl
from openforge.traces.samples import Sample, TraceOptions
from openforge.traces.source import load_blobs, open_store, plan_store

MODEL = "tiny-qwen2.5-vl"


def _screenshot(step: int) -> dict[str, Any]:
    noise = hashlib.shake_256(str(step).encode()).digest(3 * 32 * 18)
    img = Image.frombytes("RGB", (32, 18), noise).resize((1280, 720))
    out = io.BytesIO()
    img.save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


async def _bridge(tmp_path: Path) -> tuple[Sample, list[Any]]:
    """Record a 3-call GUI rollout; read its merged path and images back as the agent
    loop does."""
    model = resolve_model(MODEL)
    script = tmp_path / "s.jsonl"
    script.write_bytes(b"\n".join(orjson.dumps({"text": f"click {i}"}) for i in range(3)))
    engine = ScriptedEngine.for_model(script, model)
    gateway = Gateway(engine, SqliteStore(tmp_path / "store.db"), model=model)
    async with gateway as gw, httpx.AsyncClient(headers=gw.admin_headers) as admin:
        r = (await admin.post(f"{gw.admin_url}/rollouts", json={})).json()
        client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x")
        messages: list[dict[str, Any]] = []
        async with client:
            for step in range(3):  # every screenshot kept: one merged path
                text = {"type": "text", "text": f"Step {step}."}
                messages.append({"role": "user", "content": [text, _screenshot(step)]})
                answer = await client.chat.completions.create(model="m", messages=messages)
                content = answer.choices[0].message.content
                messages.append({"role": "assistant", "content": content})
        rid = r["rollout_id"]
        finish = {"status": "completed", "reward": 1.0}
        assert (await admin.post(f"{gw.admin_url}/rollouts/{rid}/finish", json=finish)).is_success
        body = (await admin.get(f"{gw.admin_url}/rollouts/{rid}?tokens=1")).json()
        calls = [call_from_json(c, rid) for c in body["calls"]]
        (sample, *_) = samples_of(rollout_from_json(body), calls)
        images = []
        for image in sample.images:  # what the agent loop's _images does
            resp = await admin.get(f"{gw.admin_url}/blobs/{image.sha256}")
            assert resp.headers["content-type"] == "image/png"
            with Image.open(io.BytesIO(resp.content)) as img:
                images.append(img.convert("RGB"))
        assert (await admin.get(f"{gw.admin_url}/blobs/{'0' * 64}")).status_code == 404
    return sample, images


def test_output_fields_carry_images_and_processor_settings(tmp_path: Path) -> None:
    sample, images = asyncio.run(_bridge(tmp_path))
    fields = output_fields([sample], 1.0, response_length=4096, num_turns=6, images=images)
    shown = fields["multi_modal_data"]["images"]
    assert len(shown) == len(sample.images) == 3
    assert all(img.size == (1280, 720) and img.mode == "RGB" for img in shown)
    assert fields["mm_processor_kwargs"] == {"min_pixels": 3136, "max_pixels": 50176}
    # A response cut just before the second screenshot keeps only the first image; one
    # cut through a screenshot's placeholders masks the path (its features would misalign).
    second = sample.images[1].offset - 1 - len(sample.prompt_ids)  # at its <|vision_start|>
    cut = output_fields([sample], 1.0, response_length=second, num_turns=6, images=images)
    assert len(cut["multi_modal_data"]["images"]) == 1 and cut["response_ids"]
    through = output_fields([sample], 1.0, second + 5, num_turns=6, images=images)
    assert through["extra_fields"]["openforge_masked"] and "multi_modal_data" not in through


class _QwenLikeProcessor:
    """Qwen-VL's processor around the real image processor: images → ``pixel_values`` and
    ``image_grid_thw``; each ``<|image_pad|>`` left in the text → grid-many pads (veRL
    decodes the ids with ``skip_special_tokens``, which drops the vision tokens of a
    tokenizer that marks them special, as Qwen's does)."""

    def __init__(self, image_processor: Any, tokenizer: Any) -> None:
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        self.image_token = "<|image_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = None
        self.seen: dict[str, Any] = {}

    def __call__(self, *, text: list[str], images: list[Any], **kwargs: Any) -> Any:
        kwargs.pop("videos", None)
        self.seen = {"text": text, "images": images, "kwargs": kwargs}
        out = self.image_processor(images=images, **kwargs)
        merge = self.image_processor.merge_size**2
        pieces = text[0].split(self.image_token)
        expanded = pieces[0]
        for grid, piece in zip(out["image_grid_thw"].tolist(), pieces[1:], strict=False):
            t, h, w = grid
            expanded += self.image_token * (t * h * w // merge) + piece
        out["input_ids"] = self.tokenizer([expanded], return_tensors="pt")["input_ids"]
        # Qwen's processors return it by default (``return_mm_token_type_ids``).
        out["mm_token_type_ids"] = (out["input_ids"] == self.image_token_id).long()
        return out


def _verl_or_skip() -> None:
    if importlib.util.find_spec("verl") is None:
        reason = f"verl=={VERL_VERSION} is not installed in this environment"
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def test_verl_rebuilds_the_recorded_pixel_inputs(tmp_path: Path) -> None:
    _verl_or_skip()
    import torch
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from verl.experimental.agent_loop.agent_loop import (
            AgentLoopMetrics,
            AgentLoopOutput,
            AgentLoopWorker,
        )

    sample, images = asyncio.run(_bridge(tmp_path))
    fields = output_fields([sample], 1.0, response_length=4096, num_turns=6, images=images)
    output = AgentLoopOutput(**fields, metrics=AgentLoopMetrics())
    assert output.multi_modal_data is not None and output.mm_processor_kwargs is not None
    model = resolve_model(MODEL)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    processor = _QwenLikeProcessor(Qwen2VLImageProcessorPil.from_pretrained(str(model)), tokenizer)
    worker = types.SimpleNamespace(processor=processor, tokenizer=tokenizer)
    ids = torch.tensor([output.prompt_ids + output.response_ids])
    inputs = AgentLoopWorker._compute_multi_modal_inputs(worker, output, ids)
    # veRL handed the processor our images, in order, with the recorded settings.
    assert processor.seen["kwargs"]["min_pixels"] == 3136
    assert processor.seen["images"] == output.multi_modal_data["images"]
    grids = inputs["image_grid_thw"].tolist()
    assert grids == [[1, 12, 20]] * 3
    pad = processor.image_token_id
    runs = [int(n) for n in inputs["images_seqlens"].tolist()]
    assert sum(runs) // 4 == int((ids == pad).sum())  # the same pads as the recorded ids
    assert inputs["pixel_values"].shape[0] == sum(runs)
    # veRL's M-RoPE positions from those inputs, with the model's get_rope_index bound to
    # the processor as veRL's hf_processor binds it.
    processor.config = AutoConfig.from_pretrained(str(model))
    for name in ("get_rope_index", "get_vision_position_ids"):
        setattr(processor, name, types.MethodType(getattr(Qwen2_5_VLModel, name), processor))
    mask = torch.ones_like(ids)
    positions = AgentLoopWorker._compute_position_ids(worker, ids, mask, inputs)
    assert positions.shape == (1, 4, ids.shape[1])
    text_pos, height = positions[0, 0], positions[0, 2]
    first = sample.images[0]
    block = slice(first.offset, first.offset + first.length)
    assert text_pos.tolist() == list(range(ids.shape[1]))
    assert len(set(height[block].tolist())) == 12 // 2  # the grid's merged rows


async def _samples_and_blobs(db: Path) -> tuple[list[Sample], dict[str, Any]]:
    source = open_store(db)
    try:
        plan = await plan_store(source, TraceOptions(require_reward=True))
        return plan.samples, await load_blobs(source, image_digests(plan.samples))
    finally:
        await source.close()


def test_pickled_dataproto_carries_multi_modal_data(tmp_path: Path) -> None:
    _verl_or_skip()
    import pickle

    asyncio.run(_bridge(tmp_path))
    samples, blobs = asyncio.run(_samples_and_blobs(tmp_path / "store.db"))
    assert [len(s.images) for s in samples] == [1, 2, 3]  # auto: per call for a GUI rollout
    out = tmp_path / "batch.pkl"
    assert write_verl(samples, out, blobs=blobs) == "pickled verl.DataProto"
    proto = pickle.loads(out.read_bytes())
    rows = proto.non_tensor_batch["multi_modal_data"]
    assert [len(r["images"]) for r in rows] == [1, 2, 3]
    assert all(img.size == (1280, 720) for r in rows for img in r["images"])
