"""Images in prompts for vision-language models whose placeholders the processor expands.

Qwen2.5-VL and Qwen3-VL write an image as ``<|vision_start|><|image_pad|><|vision_end|>``
and their processor repeats ``<|image_pad|>`` once per merged patch of the image's grid:
``t * h * w / merge_size**2`` times, where the grid ``(t, h, w)`` comes from the image
processor's resize rules (``min_pixels`` .. ``max_pixels``, ``patch_size``). The renderer
writes each image as a marker in the turn's text and :meth:`Vision.encode` tokenizes the
text around the markers and puts the expanded ids in their place, so prompt ids are
exactly what the model's own processor would feed it. Grids come from the
model's own image processor (transformers' PIL backend: no torchvision), cached by the
image's sha256, so a screenshot re-sent on every call is resized once.

A model directory is a VLM to OpenForge when it has ``preprocessor_config.json`` and its
tokenizer knows the three tokens.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from openforge.conversation import ImagePart

__all__ = ["IMAGE_PAD", "VISION_END", "VISION_START", "Vision", "load_vision"]

VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"
_GRIDS = 1024  # grids remembered, by image digest


class Vision:
    """One VLM's image processor and placeholder ids."""

    def __init__(self, processor: Any, start_id: int, pad_id: int, end_id: int) -> None:
        self.processor = processor
        self.start_id, self.pad_id, self.end_id = start_id, pad_id, end_id
        self.merge = int(getattr(processor, "merge_size", 2))
        self.marker = f"{VISION_START}{IMAGE_PAD}{VISION_END}"
        self._grids: OrderedDict[str, tuple[int, int, int]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def settings(self) -> dict[str, Any]:
        """The processor settings a recorded grid depends on (kept with each call)."""
        size = getattr(self.processor, "size", None) or {}
        return {
            "processor": type(self.processor).__name__,
            "min_pixels": size.get("shortest_edge"),
            "max_pixels": size.get("longest_edge"),
            "patch_size": getattr(self.processor, "patch_size", None),
            "merge_size": self.merge,
        }

    def grid(self, part: ImagePart) -> tuple[int, int, int]:
        """The image's ``(t, h, w)`` grid (cached by sha256)."""
        key = part.sha256 or ""
        with self._lock:
            found = self._grids.get(key)
        if found is not None:
            return found
        grid = self.inputs([part])[1][0]
        with self._lock:
            self._grids[key] = grid
            if len(self._grids) > _GRIDS:
                self._grids.popitem(last=False)
        return grid

    def tokens(self, part: ImagePart) -> int:
        """How many ``<|image_pad|>`` ids the image becomes."""
        t, h, w = self.grid(part)
        return t * h * w // (self.merge * self.merge)

    def encode(
        self, text: str, images: Sequence[ImagePart], encode: Callable[[str], list[int]]
    ) -> list[int]:
        """Ids of ``text`` whose i-th :attr:`marker` is ``images[i]``: the text between
        markers through ``encode`` (content: special-token text stays text), each image as
        its start id, ``tokens(image)`` pad ids and its end id."""
        pieces = text.split(self.marker)
        if len(pieces) != len(images) + 1:
            raise ValueError(
                f"a message has {len(images)} images but {len(pieces) - 1} image markers"
            )
        out = encode(pieces[0]) if pieces[0] else []
        for image, piece in zip(images, pieces[1:], strict=True):
            out += [self.start_id, *([self.pad_id] * self.tokens(image)), self.end_id]
            if piece:
                out += encode(piece)
        return out

    def inputs(self, parts: Sequence[ImagePart]) -> tuple[Any, list[tuple[int, int, int]]]:
        """``pixel_values`` (a tensor) and the grids of ``parts``, for a forward pass."""
        from PIL import Image

        images = []
        for part in parts:
            if part.data is None:
                raise ValueError(f"image {part.sha256} has no bytes to process")
            with Image.open(io.BytesIO(part.data)) as img:
                images.append(img.convert("RGB"))
        batch = self.processor(images=images, return_tensors="pt")
        grids = [(int(t), int(h), int(w)) for t, h, w in batch["image_grid_thw"].tolist()]
        return batch["pixel_values"], grids


def load_vision(model_dir: str | Path, token_id: Any) -> Vision | None:
    """The model's :class:`Vision`, or None for a text-only model.

    ``token_id`` maps a token's text to its id (None when the tokenizer lacks it)."""
    path = Path(model_dir)
    if not (path / "preprocessor_config.json").exists():
        return None
    ids = [token_id(t) for t in (VISION_START, IMAGE_PAD, VISION_END)]
    if any(i is None for i in ids):
        return None
    return Vision(_pil_processor(path), *ids)


def _pil_processor(path: Path) -> Any:
    """The directory's image processor on transformers' PIL backend (no torchvision).

    Older transformers 5 releases (veRL 0.9.1 pins 5.10) refuse ``AutoImageProcessor``
    without torchvision whatever the backend; their ``<Name>Pil`` class loads directly."""
    import json

    import transformers

    try:
        auto: Any = transformers.AutoImageProcessor  # untyped in transformers
        return auto.from_pretrained(str(path), backend="pil")
    except ImportError:
        config = json.loads((path / "preprocessor_config.json").read_text())
        name = str(config.get("image_processor_type", "")).removesuffix("Fast") + "Pil"
        cls: Any = getattr(transformers, name, None)
        if cls is None:
            raise
        return cls.from_pretrained(str(path))
