"""A 20-call GUI rollout through the openai SDK against a VLM gateway (tiny Qwen2.5-VL)."""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import openai
from PIL import Image

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore

from .conftest import new_rollout, write_script

STEPS = 20
KEEP_ALL = 10  # the harness keeps every screenshot for 10 calls, then only the newest


def _screenshot(step: int) -> dict[str, Any]:
    noise = hashlib.shake_256(str(step).encode()).digest(3 * 32 * 18)
    img = Image.frombytes("RGB", (32, 18), noise).resize((1280, 720))
    out = io.BytesIO()
    img.save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


async def test_screenshot_rollout_is_token_exact_and_prunes_fork(tmp_path: Path) -> None:
    model = resolve_model("tiny-qwen2.5-vl")
    replies = [{"text": f"step {i}: clicked"} for i in range(STEPS)]
    engine = ScriptedEngine.for_model(write_script(tmp_path / "s.jsonl", replies), model)
    store = SqliteStore(tmp_path / "store.db")
    async with Gateway(engine, store, model=model) as gw:
        r = await new_rollout(gw)
        client = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You operate a browser."}]
        async with client:
            for step in range(STEPS):
                messages.append(
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": f"Step {step}."}, _screenshot(step)],
                    }
                )
                if step >= KEEP_ALL:  # drop every screenshot but the newest
                    for m in messages[:-1]:
                        if m["role"] == "user" and isinstance(m["content"], list):
                            m["content"] = [p for p in m["content"] if p["type"] == "text"]
                answer = await client.chat.completions.create(model="m", messages=messages)
                messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        calls = await store.calls(r["rollout_id"])
        stored = await store.blob_bytes()
    assert [c.status for c in calls] == ["ok"] * STEPS
    for k, call in enumerate(calls):
        info = call.render_info
        assert info["image_processor"]["processor"] == "Qwen2VLImageProcessorPil"
        shown = info["images"]
        # 1280x720 under the tiny processor's max_pixels: a 12x20 patch grid, 60 tokens.
        assert shown[-1]["grid_thw"] == [1, 12, 20] and shown[-1]["tokens"] == 60
        assert len(shown) == (k + 1 if k < KEEP_ALL else 1)
        if k == 0:
            continue
        prev = calls[k - 1]
        extends = call.prompt_ids[: len(prev.prompt_ids) + len(prev.output_ids)] == (
            prev.prompt_ids + prev.output_ids
        )
        if k < KEEP_ALL:  # the harness only appended: the prompt extends the last one
            assert extends and not call.fork, k
        else:  # it dropped the previous screenshot(s): a fork, recorded with the reason
            assert call.fork and not extends, k
            assert "image(s) dropped from history" in info["fork_reason"], info["fork_reason"]
    # 20 distinct screenshots stored once each, though the first 10 calls re-sent them all.
    sizes = [len(base64.b64decode(_screenshot(i)["image_url"]["url"][22:])) for i in range(STEPS)]
    assert stored == sum(sizes)
