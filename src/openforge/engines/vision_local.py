"""The local engine's path for vision-language models: pixel values + prompt ids on CPU.

Qwen2.5-VL / Qwen3-VL place tokens with 3-D rotary positions that the model derives from
the prompt's image grids on the first forward pass, so these requests do not join the
text engine's shared, left-padded batch: each runs alone, one at a time, through the
model's own cache (prefill with ``pixel_values`` and ``image_grid_thw``, then one token
per step). Sampling, constraints and finish rules are the text path's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from openforge.conversation import ImagePart
from openforge.engines.base import PromptImage
from openforge.rendering.vision import Vision

__all__ = ["VisionRunner"]


class VisionRunner:
    """Runs VLM requests one at a time on the engine's model."""

    def __init__(self, model: Any, vision: Vision, device: torch.device) -> None:
        self.model = model
        self.vision = vision
        self.device = device
        self.lock = threading.Lock()  # one request (or weight update) at a time

    def run(
        self,
        prompt: list[int],
        images: list[PromptImage],
        step: Callable[[torch.Tensor], tuple[list[int], list[float]]],
        accept: Callable[[int, float], bool],
    ) -> None:
        """Generate until ``accept(token, logprob)`` says the sequence is finished;
        ``step`` turns the last position's logits into the sampled id and its logprob."""
        kwargs: dict[str, Any] = {}
        if images:  # which positions are image tokens: M-RoPE places them on the grid
            parts = [ImagePart("", i.media_type, data=i.data, sha256=i.sha256) for i in images]
            pixels, grids = self.vision.inputs(parts)
            kwargs = {
                "pixel_values": pixels.to(self.device),
                "image_grid_thw": torch.tensor(grids, device=self.device),
                "mm_token_type_ids": torch.tensor(
                    [[int(t == self.vision.pad_id) for t in prompt]], device=self.device
                ),
            }
        with self.lock, torch.inference_mode():
            ids = torch.tensor([prompt], device=self.device)
            out = self.model(input_ids=ids, use_cache=True, **kwargs)
            cache = out.cache
            length = len(prompt)
            while True:
                logits = out.logits[:, -1, :]
                tokens, logprobs = step(logits)
                if accept(tokens[0], logprobs[0]):
                    return
                out = self.model(
                    input_ids=torch.tensor([[tokens[0]]], device=self.device),
                    cache=cache,
                    cache_position=torch.tensor([length], device=self.device),
                    use_cache=True,
                )
                cache = out.cache
                length += 1
