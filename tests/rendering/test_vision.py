"""VLM prompts: placeholders expanded to the image processor's grid, token-exact, on the
tiny random Qwen2.5-VL / Qwen3-VL models; the local engine generating with pixel values."""

from __future__ import annotations

import asyncio
import hashlib
import io

import pytest
import torch
from PIL import Image

from openforge.conversation import Conversation, ImagePart, Message, SamplingParams, TextPart
from openforge.dialects.images import decode_image
from openforge.engines.base import EngineRequest, PromptImage
from openforge.engines.local import LocalEngine
from openforge.models.registry import resolve_model
from openforge.rendering.renderer import Renderer
from openforge.rendering.tokenizer import load_tokenizer
from openforge.rendering.vision import IMAGE_PAD, load_vision

FAMILIES = ["tiny-qwen2.5-vl", "tiny-qwen3-vl"]


def screenshot(seed: int, size: tuple[int, int] = (1280, 720)) -> ImagePart:
    noise = hashlib.shake_256(str(seed).encode()).digest(3 * 64 * 36)
    img = Image.frombytes("RGB", (64, 36), noise).resize(size)
    out = io.BytesIO()
    img.save(out, "PNG")
    return decode_image(out.getvalue(), "image/png", None)


def renderer_for(name: str) -> Renderer:
    path = resolve_model(name)
    tokenizer = load_tokenizer(str(path))
    vision = load_vision(path, tokenizer.token_id)
    assert vision is not None
    return Renderer(tokenizer, vision=vision)


@pytest.mark.parametrize("name", FAMILIES)
def test_placeholders_expand_to_the_processor_grid(name: str) -> None:
    renderer = renderer_for(name)
    vision = renderer.vision
    assert vision is not None
    shots = [screenshot(1), screenshot(2, (640, 400))]
    conv = Conversation(
        [Message("user", [TextPart("Open settings."), shots[0], TextPart("and"), shots[1]])]
    )
    prompt = renderer.render(conv)
    # The grid the model's own image processor gives, for the same bytes.
    pixels, grids = vision.inputs(shots)
    expected = [t * h * w // vision.merge**2 for t, h, w in grids]
    pads = prompt.ids.count(vision.pad_id)
    assert pads == sum(expected) and prompt.images == 0
    assert pixels.shape[0] == sum(t * h * w for t, h, w in grids)
    # Token-exact: the prompt is what the tokenizer gives the text with each pad repeated.
    text = renderer.tokenizer.hf.decode(prompt.ids, skip_special_tokens=False)
    assert renderer.tokenizer.encode_template(text) == prompt.ids
    runs = [
        len(r)
        for r in "".join("P" if i == vision.pad_id else "." for i in prompt.ids).split(".")
        if r
    ]
    assert runs == expected
    assert IMAGE_PAD in text


def test_history_reuses_segments_and_dropped_screenshots_fork() -> None:
    renderer = renderer_for("tiny-qwen2.5-vl")
    history = renderer.new_history()
    first = Message("user", [TextPart("Task: buy milk."), screenshot(10)])
    p1 = renderer.render(Conversation([first]), history)
    reply = renderer.encode_reply("clicking")
    history.record(p1, reply, Message("assistant", [TextPart("clicking")]))
    second = [
        first,
        Message("assistant", [TextPart("clicking")]),
        Message("user", [screenshot(11)]),
    ]
    p2 = renderer.render(Conversation(second), history)
    # Token-exact: the second prompt extends the first prompt + the sampled reply.
    assert not p2.fork and p2.ids[: len(p1.ids) + len(reply)] == p1.ids + reply
    assert p2.reused_tokens >= len(p1.ids)  # the screenshot turn came from the cache
    history.record(p2, renderer.encode_reply("done"), Message("assistant", [TextPart("done")]))
    # The harness prunes the old screenshot from the first message: a fork, with the reason.
    pruned = [Message("user", [TextPart("Task: buy milk.")]), *second[1:]]
    p3 = renderer.render(
        Conversation(
            [*pruned, Message("assistant", [TextPart("done")]), Message("user", [TextPart("ok")])]
        ),
        history,
    )
    assert p3.fork and p3.fork_reason is not None
    assert "1 image(s) dropped from history" in p3.fork_reason


def test_a_resumed_render_keeps_the_screenshots_in_order() -> None:
    """The segments a render takes from the last one (LastRender) bring their images
    along: the prompt and its images equal a render from scratch, call after call."""
    renderer, twin = renderer_for("tiny-qwen2.5-vl"), renderer_for("tiny-qwen2.5-vl")
    resumed, scratch = renderer.new_history(), twin.new_history()
    msgs = [Message("user", [TextPart("Task: buy milk."), screenshot(20)])]
    for call in range(5):
        scratch.last_render = None
        a = renderer.render(Conversation(msgs), resumed)
        b = twin.render(Conversation(msgs), scratch)
        assert a.ids == b.ids and a.ids_json == b.ids_json and not a.fork
        assert [p.sha256 for p in a.image_parts] == [p.sha256 for p in b.image_parts]
        assert len(a.image_parts) == call + 1 and a.reused_tokens == b.reused_tokens
        reply = renderer.encode_reply(f"click {call}")
        resumed.record(a, reply, Message("assistant", [TextPart(f"click {call}")]))
        scratch.record(b, reply, Message("assistant", [TextPart(f"click {call}")]))
        msgs += [
            Message("assistant", [TextPart(f"click {call}")]),
            Message("user", [TextPart("Now:"), screenshot(21 + call)]),
        ]
    assert resumed.last_render is not None and not resumed.last_render.unsure


@pytest.mark.parametrize("name", FAMILIES)
async def test_local_engine_generates_with_pixel_values(name: str) -> None:
    renderer = renderer_for(name)
    shot = screenshot(3, (320, 200))
    prompt = renderer.render(
        Conversation([Message("user", [TextPart("What is on screen?"), shot])])
    ).ids
    engine = LocalEngine(name, threads=1)
    try:
        image = PromptImage(shot.data or b"", "image/png", shot.sha256 or "")
        request = EngineRequest(
            prompt_ids=prompt, params=SamplingParams(max_tokens=6, temperature=0), images=[image]
        )
        ids: list[int] = []
        logprobs: list[float] = []
        async for chunk in engine.generate(request):
            ids += chunk.ids
            logprobs += chunk.logprobs
        assert len(ids) == 6
        # The same ids and logprobs from one plain forward pass over prompt + output.
        vision = engine._vision_runner.vision if engine._vision_runner else None
        assert vision is not None
        pixels, grids = vision.inputs([shot])
        with torch.inference_mode():
            out = engine.model(
                input_ids=torch.tensor([prompt + ids]),
                pixel_values=pixels,
                image_grid_thw=torch.tensor(grids),
                mm_token_type_ids=(torch.tensor([prompt + ids]) == vision.pad_id).long(),
            )
        logits = out.logits[0, len(prompt) - 1 : -1].float()
        assert logits.argmax(-1).tolist() == ids
        rescored = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(logprobs), rescored, atol=1e-4)
        # Without the pixels the model sees other inputs: the image reached the model.
        with torch.inference_mode():
            blind = engine.model(input_ids=torch.tensor([prompt])).logits[0, -1]
        assert not torch.allclose(blind.float(), logits[0], atol=1e-3)
    finally:
        await engine.close()
    await asyncio.sleep(0)
