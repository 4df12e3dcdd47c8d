"""Tiny, randomly initialised Qwen2.5-VL and Qwen3-VL models, for tests and benches.

No vision-language weights can be fetched here, so the GUI setting is tested on models
built from the families' own transformers configs with small sizes (two text layers of
width 64, a two-block vision tower): the real architectures, the real image processor
(transformers' PIL backend, no torchvision) and the real placeholder scheme, with random
weights. The tokenizer is SmolLM2's plus the vision tokens the family's prompts use; the
image processor's ``max_pixels`` is kept small so a 1280x720 screenshot becomes tens of
tokens, not thousands. Any real Qwen-VL directory given as ``--model`` works the same way.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

# The family's vision tokens (as openforge.rendering.vision reads them).
VISION_START, IMAGE_PAD, VISION_END = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>"

__all__ = ["TINY_VLMS", "build_tiny_vlm"]

Family = Literal["qwen2_5_vl", "qwen3_vl"]
# Registry name -> family.
TINY_VLMS: dict[str, Family] = {"tiny-qwen2.5-vl": "qwen2_5_vl", "tiny-qwen3-vl": "qwen3_vl"}
_SEED = 4321
_VIDEO_PAD = "<|video_pad|>"


def _text(vocab: int, eos: int, rope: dict[str, Any]) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 8192,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "bos_token_id": eos,
        "rope_parameters": rope,
    }


def _config(family: Family, ids: dict[str, int], vocab: int, eos: int) -> Any:
    special: dict[str, Any] = {
        "image_token_id": ids[IMAGE_PAD],
        "video_token_id": ids[_VIDEO_PAD],
        "vision_start_token_id": ids[VISION_START],
        "vision_end_token_id": ids[VISION_END],
    }
    # mrope: the 16-wide heads' 8 rotary pairs split over (time, height, width).
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    # The vision tower both families share: two 32-wide blocks, 64-wide merged output.
    tower = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
    }
    if family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        vision = {**tower, "fullatt_block_indexes": [1], "window_size": 56}
        return Qwen2_5_VLConfig(
            text_config=_text(vocab, eos, rope), vision_config=vision, **special
        )
    from transformers import Qwen3VLConfig

    vision = {
        **tower,
        "patch_size": 16,
        "num_position_embeddings": 256,
        "deepstack_visual_indexes": [1],
    }
    rope3 = {**rope, "mrope_interleaved": True}
    return Qwen3VLConfig(text_config=_text(vocab, eos, rope3), vision_config=vision, **special)


def build_tiny_vlm(target: Path, family: Family, tokenizer_dir: Callable[[], Path]) -> Path:
    """Build (once) a seeded random ``family`` model at ``target``, with the tokenizer and
    chat template of ``tokenizer_dir()`` plus the vision tokens. ``tokenizer_dir`` is only
    called for a build, so a model built earlier resolves without that model."""
    if (target / "config.json").is_file() and (target / "preprocessor_config.json").is_file():
        return target
    source = tokenizer_dir()
    import torch
    from tokenizers import AddedToken, Tokenizer
    from transformers import AutoModelForImageTextToText, PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    raw = Tokenizer.from_file(str(source / "tokenizer.json"))
    specials = [VISION_START, VISION_END, IMAGE_PAD, _VIDEO_PAD]
    raw.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    ids: dict[str, int] = {t: raw.token_to_id(t) or 0 for t in specials}
    fast: Any = PreTrainedTokenizerFast  # untyped in transformers
    tokenizer = fast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|im_end|>")
    eos = int(tokenizer.eos_token_id)
    config = _config(family, ids, raw.get_vocab_size(), eos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_SEED)
        auto: Any = AutoModelForImageTextToText
        model = auto.from_config(config)
    patch = 14 if family == "qwen2_5_vl" else 16
    unit = patch * 2  # one merged patch
    processor = Qwen2VLImageProcessorPil(
        patch_size=patch, min_pixels=unit * unit * 4, max_pixels=unit * unit * 64
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    tokenizer.save_pretrained(str(tmp))
    template = source / "chat_template.jinja"
    if template.is_file():
        (tmp / "chat_template.jinja").write_text(template.read_text())
    processor.save_pretrained(str(tmp))
    model.save_pretrained(str(tmp), safe_serialization=True)
    if target.exists():  # built meanwhile by another process
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(target)
    return target
