"""Vendor computer-use rollouts recorded by a VLM gateway export as per-call VLM samples:
the screenshots of Anthropic ``tool_result`` blocks and Responses ``computer_call_output``
items are the samples' images, each at its placeholder run in ``input_ids``."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
from PIL import Image

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.rendering.tokenizer import load_tokenizer
from openforge.rendering.vision import IMAGE_PAD
from openforge.store.sqlite import SqliteStore
from openforge.traces.samples import Mode, TraceOptions
from openforge.traces.source import open_store, plan_store

CALLS = 3


def _png(seed: str) -> bytes:
    noise = hashlib.shake_256(seed.encode()).digest(3 * 32 * 18)
    out = io.BytesIO()
    Image.frombytes("RGB", (32, 18), noise).resize((640, 360)).save(out, "PNG")
    return out.getvalue()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _anthropic(gw: Gateway, r: dict[str, Any]) -> list[bytes]:
    client = anthropic.AsyncAnthropic(base_url=r["anthropic_base_url"], api_key="x", max_retries=0)
    tools: Any = [
        {
            "type": "computer_20250124",
            "name": "computer",
            "display_width_px": 640,
            "display_height_px": 360,
        }
    ]
    msgs: list[Any] = [{"role": "user", "content": "Click the button."}]
    shots: list[bytes] = []
    async with client:
        for step in range(CALLS):
            reply = await client.beta.messages.create(
                model="claude-x", max_tokens=64, messages=msgs, tools=tools
            )
            use = reply.content[-1]
            assert use.type == "tool_use" and use.name == "computer"
            shots.append(_png(f"a{step}"))
            image = {"type": "base64", "media_type": "image/png", "data": _b64(shots[-1])}
            msgs += [
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in reply.content],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": use.id,
                            "content": [{"type": "image", "source": image}],
                        }
                    ],
                },
            ]
    return shots


async def _responses(gw: Gateway, r: dict[str, Any]) -> list[bytes]:
    client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
    tool: Any = {
        "type": "computer_use_preview",
        "display_width": 640,
        "display_height": 360,
        "environment": "linux",
    }
    items: list[Any] = [{"role": "user", "content": "Click the button."}]
    shots: list[bytes] = []
    async with client:
        for step in range(CALLS):
            reply = await client.responses.create(model="m", input=items, tools=[tool])
            call = reply.output[-1]
            assert call.type == "computer_call"
            shots.append(_png(f"o{step}"))
            url = "data:image/png;base64," + _b64(shots[-1])
            items += [
                call.model_dump(exclude_none=True),
                {
                    "type": "computer_call_output",
                    "call_id": call.call_id,
                    "output": {"type": "computer_screenshot", "image_url": url},
                },
            ]
    return shots


async def _admin(gw: Gateway, path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=gw.admin_headers) as admin:
        r = await admin.post(gw.admin_url + path, json=body)
    assert r.status_code in (200, 201), r.text
    return dict(r.json())


async def test_vendor_rollouts_export_per_call_vlm_samples(tmp_path: Path) -> None:
    model = resolve_model("tiny-qwen2.5-vl")
    click = {"action": "left_click", "coordinate": [10, 20]}
    preview = {"type": "click", "button": "left", "x": 10, "y": 20}
    # Each rollout counts its own calls: the same line k answers both rollouts' k-th call,
    # and each dialect's computer tool is named "computer".
    lines = [{"tool_calls": [{"name": "computer", "arguments": click | preview}]}] * CALLS
    script = tmp_path / "script.jsonl"
    script.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    engine = ScriptedEngine.for_model(script, model)
    db = tmp_path / "store.db"
    shots: dict[str, list[bytes]] = {}
    async with Gateway(engine, SqliteStore(db), model=model) as gw:
        for name, drive in (("anthropic", _anthropic), ("responses", _responses)):
            r = await _admin(gw, "/rollouts", {"group_id": "g"})
            shots[name] = await drive(gw, r)
            finish = {"status": "completed", "reward": 1.0}
            await _admin(gw, f"/rollouts/{r['rollout_id']}/finish", finish)
    source = open_store(db)
    try:
        plan = await plan_store(source, TraceOptions(mode=Mode.AUTO, require_reward=True))
    finally:
        await source.close()
    samples = plan.samples
    assert len(samples) == 2 * CALLS
    assert {s.mode for s in samples} == {Mode.PER_CALL}  # images: one sample per call
    pad = load_tokenizer(model).token_id(IMAGE_PAD)
    for k, name in enumerate(("anthropic", "responses")):
        mine = samples[k * CALLS : (k + 1) * CALLS]
        assert len({s.rollout_id for s in mine}) == 1
        for n, sample in enumerate(mine):
            # Call n shows the n screenshots returned so far, in order.
            digests = [hashlib.sha256(b).hexdigest() for b in shots[name][:n]]
            assert [i.sha256 for i in sample.images] == digests
            for image in sample.images:
                run = sample.input_ids[image.offset : image.offset + image.length]
                assert run == [pad] * image.length and image.length > 0
