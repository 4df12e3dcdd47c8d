"""The trainer and the local engine on a CUDA device, on the `tiny` models.

Skipped where torch sees no CUDA device. What runs here: no model fetches Hub kernels;
``dtype: auto`` computes in bf16 on the GPU and updates float32 master weights, so an update
at the default learning rate is kept; float32 on the GPU gives the CPU's logprobs, loss and
gradient; the logprobs the local engine records on the GPU are the ones the trainer
recomputes there (GRPO's importance ratio is their difference), also after a weight update
exported from the GPU; checkpoints and LoRA exports written from GPU tensors load again.
The tiny Qwen2.5-VL and
Qwen3-VL train on a sample that shows images under bf16 autocast (the vision tower too), and
the engine's logprobs for an image request are the ones the trainer recomputes from the
pixels. Gradient checkpointing gives the loss and gradient of a plain backward pass, under
bf16 autocast and in float32.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from openforge.conversation import ImagePart, SamplingParams
from openforge.engines.base import EngineRequest, PromptImage
from openforge.engines.local import LocalEngine
from openforge.models.registry import resolve_model
from openforge.models.tiny_vlm import TINY_VLMS
from openforge.rendering.vision import Vision
from openforge.traces.samples import Sample, SampleImage
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer

from .samples import sample as _sample

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device: runs on a GPU machine"
    ),
]

GPU = "cuda"  # every test puts its trainer or engine here


def _on_gpu(t: torch.Tensor | torch.nn.Module | Trainer) -> bool:
    device = t.device if isinstance(t, torch.Tensor | Trainer) else next(t.parameters()).device
    return device.type == torch.device(GPU).type


def _on_policy(
    trainer: Trainer, samples: list[Sample], images: dict[str, bytes] | None = None
) -> None:
    """Record the trainer's own logprobs as the rollout logprobs (0 where not trained)."""
    for s, row in zip(samples, trainer.token_logprobs(samples, images), strict=True):
        trained = iter(row)
        s.logprobs = [next(trained) if m else 0.0 for m in s.loss_mask]


def _mixed_batch() -> tuple[list[Sample], dict[str, float]]:
    """Rows of different lengths (padding), a common 40-id system prompt (the trainer runs
    it once and broadcasts its keys and values) and a loss mask with a hole."""
    system = list(range(300, 340))
    samples = [
        _sample(f"r{i}", [*system, 50 + i, *([60 + i] * i)], [70 + i, 71, 72, 2][: 2 + i % 3])
        for i in range(4)
    ]
    samples[1].loss_mask = [1, 0, 1]
    return samples, {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5}


def _snapshot_grads(trainer: Trainer, into: list[torch.Tensor]) -> None:
    """Append the flattened gradient to ``into`` each time the optimizer steps."""
    step = trainer.optimizer.step

    def recording(*args: Any, **kwargs: Any) -> Any:
        into.append(torch.cat([p.grad.flatten() for p in trainer.params.values()]).cpu())
        return step(*args, **kwargs)

    trainer.optimizer.step = recording  # type: ignore[method-assign]


def _changed_fraction(before: dict[str, torch.Tensor], trainer: Trainer) -> float:
    """The fraction of the weights in ``before`` (name: value) that the trainer changed."""
    changed = sum(int((b != trainer.params[n].detach()).sum()) for n, b in before.items())
    total = sum(int(b.numel()) for b in before.values())
    return changed / total


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


async def _generate(
    engine: LocalEngine,
    prompt: list[int],
    images: list[PromptImage] | None = None,
    **params: object,
) -> tuple[list[int], list[float]]:
    ids: list[int] = []
    logprobs: list[float] = []
    sampling = SamplingParams(**params)  # type: ignore[arg-type]
    request = EngineRequest(prompt_ids=prompt, params=sampling, images=images or [])
    async for chunk in engine.generate(request):
        ids += chunk.ids
        logprobs += chunk.logprobs
    return ids, logprobs


async def test_the_trainer_and_the_engine_on_the_gpu_use_no_hub_kernels(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers 5 kernelizes a model by default: moved to CUDA and put in training mode,
    # it fetches layer kernels (kernels-community/rotary) from the Hugging Face Hub. An
    # offline trainer then fails, a connected one trains with code the engine never runs.
    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)  # the environment's default
    trainer = Trainer(TrainConfig(model=str(tiny), kl_coef=0.1), tiny, device=GPU)
    trainer.model.eval()
    trainer.model.train()  # a mode change is what re-kernelized
    for model in (trainer.model, trainer.ref_model):
        assert _on_gpu(model)
        assert model.use_kernels is False and model.kernels_mode is None
    samples = [_sample("x", [1, 9, 10], [11, 2]), _sample("y", [1, 9, 10], [12, 2])]
    assert trainer.train_step(samples, {"x": 1.0, "y": -1.0}).accepted
    engine = LocalEngine("tiny", device=GPU)
    try:
        assert _on_gpu(engine.model)
        assert engine.model.use_kernels is False and engine.model.kernels_mode is None
    finally:
        await engine.close()


def test_auto_dtype_computes_in_bf16_with_float32_weights_on_the_gpu(tiny: Path) -> None:
    trainer = Trainer(TrainConfig(model=str(tiny), learning_rate=1e-3), tiny, device=GPU)
    assert _on_gpu(trainer) and trainer.dtype is torch.bfloat16  # the compute dtype
    assert all(_on_gpu(p) and p.dtype is torch.float32 for p in trainer.params.values())
    computed: list[torch.dtype] = []

    def record(module: Any, args: Any, output: Any) -> None:
        computed.append(output.dtype)

    # the projections run in bf16 (the residual stream stays in the weights' float32)
    trainer.model.get_decoder().layers[0].self_attn.q_proj.register_forward_hook(record)
    trainer.model.get_output_embeddings().register_forward_hook(record)
    prompt = [1, 42, 43, 44, 45]
    good = _sample("good", prompt, [100, 101, 102, 2])
    bad = _sample("bad", [*prompt, 7, 8], [200, 201, 2])
    _on_policy(trainer, [good, bad])
    before = trainer.sequence_logprobs([good, bad])
    result = trainer.train_step([good, bad], {"good": 1.0, "bad": -1.0})
    assert result.accepted and result.version == 1, result.reason
    # bf16 logits round differently in the padded batch than row by row: ratios near 1
    assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=0.1)
    after = trainer.sequence_logprobs([good, bad])
    print(f"bf16 at lr 1e-3: rewarded {before[0]:.4f} -> {after[0]:.4f}, "
          f"penalised {before[1]:.4f} -> {after[1]:.4f}")  # fmt: skip
    assert after[0] > before[0]
    assert after[1] < before[1]
    assert computed and set(computed) == {torch.bfloat16}  # the matmuls ran in bf16
    assert all(p.dtype is torch.float32 for p in trainer.params.values())
    states = [trainer.optimizer.state[p] for p in trainer.params.values()]
    for key in ("exp_avg", "exp_avg_sq"):
        assert all(_on_gpu(s[key]) and s[key].dtype is torch.float32 for s in states)


def test_an_update_at_the_default_learning_rate_is_kept_under_bf16(tiny: Path) -> None:
    # `dtype: auto` computes in bf16 on CUDA. An AdamW step moves each weight by about the
    # learning rate (1e-5 by default), far below one bf16 step at the weights' size: a
    # trainer that kept no float32 copy of the weights rounded most updates away.
    reference = Trainer(TrainConfig(model=str(tiny), dtype="float32"), tiny, device="cpu")
    trainer = Trainer(TrainConfig(model=str(tiny)), tiny, device=GPU)
    assert trainer.dtype is torch.bfloat16
    assert all(p.dtype is torch.float32 for p in trainer.params.values())
    fractions = []
    for t in (reference, trainer):
        prompt = [1, 42, 43, 44, 45]
        samples = [_sample("good", prompt, [100, 101, 102, 2]), _sample("bad", prompt, [200, 2])]
        _on_policy(t, samples)
        before = {n: p.detach().clone() for n, p in t.params.items()}
        assert t.train_step(samples, {"good": 1.0, "bad": -1.0}).accepted
        fractions.append(_changed_fraction(before, t))
    print(f"weights changed by one update at lr 1e-5: fp32 CPU {fractions[0]:.4f}, "
          f"auto (bf16 compute, fp32 masters) on CUDA {fractions[1]:.4f}")  # fmt: skip
    assert fractions[0] > 0.9
    assert fractions[1] > 0.5, (
        f"one bf16 update at lr {trainer.config.learning_rate} changed only "
        f"{fractions[1]:.2%} of the trainable weights (float32: {fractions[0]:.2%})"
    )


def test_the_reference_gives_the_policys_logprobs_before_it_moves_under_bf16(
    tiny: Path,
) -> None:
    # The reference is loaded as the policy's masters are (float32) and runs under the same
    # autocast: KL 0 until the policy moves. A bf16 copy would show a KL before any update.
    trainer = Trainer(TrainConfig(model=str(tiny), kl_coef=0.1), tiny, device=GPU)
    assert trainer.dtype is torch.bfloat16 and _on_gpu(trainer.ref_model)
    samples, adv = _mixed_batch()
    _on_policy(trainer, samples)
    first = trainer.train_step(samples, adv)
    assert first.accepted, first.reason
    print(f"KL to the reference before any update (bf16 compute): {first.metrics['kl']:.2e}")
    assert first.metrics["kl"] == pytest.approx(0.0, abs=1e-5)  # a bf16 copy: about 2.6e-3


def test_float32_on_the_gpu_matches_the_cpu(tiny: Path) -> None:
    samples, adv = _mixed_batch()
    cfg = TrainConfig(model=str(tiny), dtype="float32", learning_rate=1e-4)
    runs = []
    for device in ("cpu", GPU):
        trainer = Trainer(cfg, tiny, device=device)
        assert trainer.dtype is torch.float32
        if device == "cpu":
            _on_policy(trainer, samples)  # both devices train on the CPU's rollout logprobs
        grads: list[torch.Tensor] = []
        _snapshot_grads(trainer, grads)
        before = trainer.token_logprobs(samples)
        result = trainer.train_step(samples, adv)
        assert result.accepted and result.metrics["micro_batches"] == 1
        runs.append((before, result.metrics, grads[0], trainer.token_logprobs(samples)))
    (cpu_lp, cpu_m, cpu_g, cpu_after), (gpu_lp, gpu_m, gpu_g, gpu_after) = runs
    print(f"fp32 GPU vs CPU: logprobs {_max_diff(cpu_lp, gpu_lp):.2e}, after one update "
          f"{_max_diff(cpu_after, gpu_after):.2e}, loss {cpu_m['loss']:.6f} vs "
          f"{gpu_m['loss']:.6f}, grad {float((cpu_g - gpu_g).abs().max()):.2e}")  # fmt: skip
    assert _max_diff(cpu_lp, gpu_lp) < 1e-4
    for key in ("loss", "pg_loss", "entropy", "ratio_mean", "grad_norm"):
        assert gpu_m[key] == pytest.approx(cpu_m[key], rel=1e-4, abs=1e-6), key
    scale = float(cpu_g.abs().max())
    assert scale > 1e-3  # the update is not trivially zero
    assert torch.allclose(gpu_g, cpu_g, atol=1e-5 * scale, rtol=1e-3)
    assert _max_diff(cpu_after, gpu_after) < 1e-3  # the same AdamW update on both


async def test_engine_logprobs_on_the_gpu_are_the_trainers(tiny: Path, tmp_path: Path) -> None:
    # GRPO's ratio is exp(trainer logprob − engine logprob): on-policy it must be 1.
    engine = LocalEngine("tiny", device=GPU)
    try:
        assert _on_gpu(engine.model)
        cfg = TrainConfig(model=str(tiny), dtype="float32", temperature=0.7, learning_rate=1e-3)
        trainer = Trainer(cfg, tiny, device=GPU)
        texts = ["The quick brown fox", "Once upon a time", "Count with me: one, two", "Hi"]
        prompts = [list(engine.tokenizer.encode(t)) for t in texts]

        async def rollouts(version: str) -> list[Sample]:
            outs = await asyncio.gather(
                *(_generate(engine, p, max_tokens=24, temperature=0.7, seed=i)
                  for i, p in enumerate(prompts))
            )  # fmt: skip
            samples = []
            for i, (prompt, (ids, logprobs)) in enumerate(zip(prompts, outs, strict=True)):
                assert ids and len(ids) == len(logprobs)
                s = _sample(f"{version}-{i}", prompt, ids)
                s.logprobs = logprobs
                samples.append(s)
            return samples

        samples = await rollouts("v0")
        engine_lp = [s.logprobs for s in samples]
        diff = _max_diff(engine_lp, trainer.token_logprobs(samples))
        print(f"engine vs trainer on the GPU, fp32 T=0.7: {diff:.2e}")
        assert diff < 1e-3
        adv = {s.rollout_id: (1.0 if i % 2 else -1.0) for i, s in enumerate(samples)}
        result = trainer.train_step(samples, adv)
        assert result.accepted
        assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
        assert result.metrics["clip_fraction"] == 0.0
        assert result.metrics["tis_fraction"] == 0.0
        assert result.metrics["mismatch_abs_logprob"] < 1e-3
        # the updated policy, exported from the GPU and loaded by the engine
        await engine.update_weights(str(trainer.export_weights(tmp_path / "v1")), "v1")
        assert engine.info().weight_version == "v1"
        samples = await rollouts("v1")
        diff = _max_diff([s.logprobs for s in samples], trainer.token_logprobs(samples))
        print(f"engine vs trainer after a weight update: {diff:.2e}")
        assert diff < 1e-3
    finally:
        await engine.close()


async def test_greedy_decoding_on_the_gpu_matches_the_cpu() -> None:
    engines = [LocalEngine("tiny", device="cpu"), LocalEngine("tiny", device=GPU)]
    try:
        prompt = list(engines[0].tokenizer.encode("Tell me a story about a robot"))
        (cpu_ids, cpu_lp), (gpu_ids, gpu_lp) = [
            await _generate(e, prompt, max_tokens=32, temperature=0.0) for e in engines
        ]
        assert len(gpu_ids) == len(cpu_ids) > 0
        assert gpu_ids == cpu_ids
        assert torch.allclose(torch.tensor(gpu_lp), torch.tensor(cpu_lp), atol=1e-3)
    finally:
        for e in engines:
            await e.close()


_CKPT_SAMPLES = ([1, 9, 10], [[11, 2], [12, 2]])


def _checkpointed(
    tiny: Path, directory: Path, dtype: str
) -> tuple[Trainer, dict[str, torch.Tensor]]:
    """A GPU trainer after one update, its checkpoint written to ``directory``, and a copy
    of its trainable weights as saved."""
    cfg = TrainConfig(model=str(tiny), dtype=dtype, learning_rate=1e-3)  # type: ignore[arg-type]
    a = Trainer(cfg, tiny, device=GPU)
    assert a.train_step(*_ckpt_batch()).accepted
    a.save_checkpoint(directory, extra={"step": 1})
    return a, {n: p.detach().clone() for n, p in a.params.items()}


def _ckpt_batch() -> tuple[list[Sample], dict[str, float]]:
    prompt, (x, y) = _CKPT_SAMPLES
    return [_sample("x", prompt, x), _sample("y", prompt, y)], {"x": 1.0, "y": -1.0}


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_a_gpu_checkpoint_resumes_exactly_on_the_gpu(
    tiny: Path, tmp_path: Path, dtype: str
) -> None:
    a, saved = _checkpointed(tiny, tmp_path / "ckpt", dtype)
    b = Trainer(a.config, tiny, device=GPU)
    assert b.load_checkpoint(tmp_path / "ckpt") == {"step": 1}
    assert b.version == a.version == 1
    for name, p in b.params.items():
        assert _on_gpu(p) and p.dtype is torch.float32, name  # float32 masters either way
        assert torch.equal(p, saved[name]), name
        mine, theirs = b.optimizer.state[p], a.optimizer.state[a.params[name]]
        assert set(mine) == set(theirs), name
        for key, value in theirs.items():
            assert mine[key].device == value.device, (name, key)
            assert mine[key].dtype == value.dtype, (name, key)
            assert torch.equal(mine[key], value), (name, key)
    assert a.train_step(*_ckpt_batch()).accepted
    assert b.train_step(*_ckpt_batch()).accepted  # same state in, same weights out
    # float32 masters both; bf16 matmuls may only sum in another order (an update is 1e-3)
    tolerance = 1e-6 if dtype == "float32" else 1e-4
    for name, p in a.params.items():
        assert torch.allclose(p, b.params[name], atol=tolerance), name


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_a_gpu_checkpoint_resumes_on_the_cpu(tiny: Path, tmp_path: Path, dtype: str) -> None:
    # A run's checkpoint holds CPU tensors: the float32 masters and moments, whatever the
    # compute dtype (`dtype: auto` is bf16 on CUDA, float32 on the CPU).
    a, saved = _checkpointed(tiny, tmp_path / "ckpt", dtype)
    c = Trainer(a.config, tiny, device="cpu")
    assert c.load_checkpoint(tmp_path / "ckpt") == {"step": 1}
    for name, p in c.params.items():
        assert torch.equal(p, saved[name].cpu().to(p.dtype)), name
    result = c.train_step(*_ckpt_batch())
    assert result.accepted, result.reason


def test_lora_on_the_gpu_exports_merged_weights(tiny: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    cfg = TrainConfig(model=str(tiny), dtype="float32", lora=True, lora_rank=4, learning_rate=1e-2)
    trainer = Trainer(cfg, tiny, device=GPU)
    assert trainer.params and all("lora_" in n for n in trainer.params)
    assert all(_on_gpu(p) for p in trainer.params.values())
    samples = [_sample("x", [1, 9, 10], [11, 2]), _sample("y", [1, 9, 10], [12, 2])]
    assert trainer.train_step(samples, {"x": 1.0, "y": -1.0}).accepted
    out = trainer.export_weights(tmp_path / "v1")
    state = load_file(str(out / "model.safetensors"))
    assert not any("lora" in k for k in state)
    base = load_file(str(tiny / "model.safetensors"))
    moved = [k for k in state if "q_proj" in k and not torch.equal(state[k], base[k])]
    assert moved  # the trained adapters are merged into the exported weights
    # the merged model on the CPU scores tokens as the adapted model does on the GPU
    merged = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    ids = torch.tensor([[1, 9, 10, 11, 2, 12]])
    with torch.no_grad():
        on_gpu = trainer.model(ids.to(GPU)).logits.float().cpu()
        on_cpu = merged(ids).logits.float()
    diff = float((torch.log_softmax(on_gpu, -1) - torch.log_softmax(on_cpu, -1)).abs().max())
    print(f"LoRA merged export (CPU) vs adapted model (GPU), logprobs: {diff:.2e}")
    assert diff < 1e-3


# --- vision-language models ---------------------------------------------------------------

VLMS = sorted(TINY_VLMS)  # tiny random Qwen2.5-VL and Qwen3-VL (registry names)


@pytest.fixture(scope="module")
def vlm_paths() -> dict[str, Path]:
    return {name: resolve_model(name) for name in VLMS}


def _screenshot(seed: int, size: tuple[int, int] = (320, 200)) -> bytes:
    """A PNG of seeded noise, scaled up (as the CPU multimodal tests build them)."""
    noise = hashlib.shake_256(str(seed).encode()).digest(3 * 32 * 20)
    out = io.BytesIO()
    Image.frombytes("RGB", (32, 20), noise).resize(size).save(out, "PNG")
    return out.getvalue()


def _vlm_prompt(
    vision: Vision, tokenizer: Any, text: str, shots: list[bytes]
) -> tuple[list[int], list[SampleImage]]:
    """Prompt ids for ``text`` whose i-th ``vision.marker`` shows ``shots[i]`` (the
    placeholders expanded to the image processor's grid), and the images as a sample
    lists them: digest, grid and where their pad ids start."""
    parts = [
        ImagePart("", "image/png", data=d, sha256=hashlib.sha256(d).hexdigest()) for d in shots
    ]
    ids = vision.encode(text, parts, lambda t: list(tokenizer.encode(t, add_special_tokens=False)))
    starts = [i + 1 for i, t in enumerate(ids) if t == vision.start_id]
    images = [
        SampleImage(p.sha256 or "", "image/png", at, vision.tokens(p), vision.grid(p))
        for p, at in zip(parts, starts, strict=True)
    ]
    for image in images:
        assert ids[image.offset : image.offset + image.length] == [vision.pad_id] * image.length
    return ids, images


def _vlm_sample(
    rollout_id: str, prompt: tuple[list[int], list[SampleImage]], response: list[int]
) -> Sample:
    s = _sample(rollout_id, prompt[0], response)
    s.images = prompt[1]
    return s


def _image_bytes(*shots: bytes) -> dict[str, bytes]:
    return {hashlib.sha256(d).hexdigest(): d for d in shots}


def _split_grad(trainer: Trainer, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """A flattened gradient (as :func:`_snapshot_grads` records it) split into the vision
    tower's part and the rest."""
    parts: dict[str, list[torch.Tensor]] = {"vision": [], "text": []}
    at = 0
    for name, p in trainer.params.items():
        parts["vision" if ".visual." in name else "text"].append(flat[at : at + p.numel()])
        at += p.numel()
    assert at == flat.numel()
    return {k: torch.cat(v).double() for k, v in parts.items()}


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.parametrize("name", VLMS)
def test_a_vlm_trains_on_images_under_bf16(name: str, vlm_paths: dict[str, Path]) -> None:
    # The VLM path of `dtype: auto` on CUDA: pixel values in the masters' float32, the
    # vision tower and the language model under bf16 autocast, float32 masters updated.
    path = vlm_paths[name]
    reference = Trainer(TrainConfig(model=str(path), dtype="float32"), path, device="cpu")
    trainer = Trainer(TrainConfig(model=str(path)), path, device=GPU)
    assert trainer.vision is not None and trainer.dtype is torch.bfloat16
    assert all(_on_gpu(p) and p.dtype is torch.float32 for p in trainer.params.values())
    computed: dict[str, set[torch.dtype]] = {}

    def recorder(where: str) -> Any:
        def record(module: Any, args: Any, output: Any) -> None:
            computed.setdefault(where, set()).add(output.dtype)

        return record

    inner = trainer.model.model
    inner.visual.blocks[0].attn.qkv.register_forward_hook(recorder("vision qkv"))
    inner.language_model.layers[0].self_attn.q_proj.register_forward_hook(recorder("q_proj"))
    trainer.model.get_output_embeddings().register_forward_hook(recorder("lm_head"))
    one, two = _screenshot(1), _screenshot(2, (640, 400))
    images = _image_bytes(one, two)
    fractions: list[float] = []
    results = []
    grads: list[dict[str, torch.Tensor]] = []
    for t in (reference, trainer):
        assert t.vision is not None
        text = f"Step 1: {t.vision.marker} and now {t.vision.marker} What next?"
        prompt = _vlm_prompt(t.vision, t.tokenizer, text, [one, two])
        samples = [
            _vlm_sample("good", prompt, [100, 101, 102, 2]),
            _vlm_sample("bad", prompt, [200, 201, 2]),
        ]
        _on_policy(t, samples, images)
        before = {n: p.detach().clone() for n, p in t.params.items()}
        flat: list[torch.Tensor] = []
        _snapshot_grads(t, flat)
        result = t.train_step(samples, {"good": 1.0, "bad": -1.0}, images)
        grads.append(_split_grad(t, flat[0]))
        assert result.accepted and result.version == 1, result.reason
        results.append(result.metrics)
        # Rows of tokens the samples never show get no gradient (no weight decay): the
        # input embeddings are left out of the count (half the weights; the LM head is not
        # tied to them and gets a full gradient).
        rest = {n: p for n, p in before.items() if "embed_tokens" not in n}
        fractions.append(_changed_fraction(rest, t))
        visual = {n: p for n, p in before.items() if ".visual." in n}
        assert visual and _changed_fraction(visual, t) > 0.5, "no update through the pixels"
    (ref_m, m), (ref_frac, frac) = results, fractions
    # the bf16 gradient points where the float32 one does, the vision tower's too
    cos = {k: round(_cosine(grads[0][k], grads[1][k]), 6) for k in grads[0]}
    print(f"{name}: loss fp32 CPU {ref_m['loss']:.6f} / auto CUDA {m['loss']:.6f}, ratio "
          f"{m['ratio_mean']:.6f}, mismatch {m['mismatch_abs_logprob']:.2e}; grad norm "
          f"{ref_m['grad_norm']:.5f} / {m['grad_norm']:.5f}, cosine to fp32 {cos}; weights "
          f"changed at lr 1e-5 (but the input embeddings): fp32 CPU {ref_frac:.4f}, "
          f"auto CUDA {frac:.4f}; computed in {computed}")  # fmt: skip
    assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0
    assert m["micro_batches"] == 2  # a sample that shows images runs alone
    # On-policy logprobs from the same one-sample forward pass: the ratio is 1 but for
    # kernel noise (the text test's 0.1 is for bf16 padding, absent here).
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-2)
    assert m["mismatch_abs_logprob"] < 1e-2
    assert m["grad_norm"] == pytest.approx(ref_m["grad_norm"], rel=0.05)
    assert all(c > 0.99 for c in cos.values()), cos
    assert computed == {k: {torch.bfloat16} for k in ("vision qkv", "q_proj", "lm_head")}
    assert all(p.dtype is torch.float32 for p in trainer.params.values())
    assert ref_frac > 0.9
    assert frac > 0.5, f"one bf16 update at lr 1e-5 changed only {frac:.2%} (fp32 {ref_frac:.2%})"


@pytest.mark.parametrize("name", VLMS)
async def test_engine_logprobs_for_images_on_the_gpu_are_the_trainers(
    name: str, vlm_paths: dict[str, Path], tmp_path: Path
) -> None:
    # The engine runs a VLM request alone with the pixels (M-RoPE positions from the
    # grids); the trainer recomputes the sampled tokens from the same bytes.
    path = vlm_paths[name]
    engine = LocalEngine(name, device=GPU)  # float32 (the engine's default)
    try:
        assert _on_gpu(engine.model) and engine._vision_runner is not None
        cfg = TrainConfig(model=str(path), dtype="float32", temperature=0.7, learning_rate=1e-3)
        trainer = Trainer(cfg, path, device=GPU)
        auto = Trainer(TrainConfig(model=str(path), temperature=0.7), path, device=GPU)
        assert trainer.vision is not None and auto.dtype is torch.bfloat16
        shots = [_screenshot(10), _screenshot(11, (640, 400)), _screenshot(12, (200, 320))]
        images = _image_bytes(*shots)
        marker = trainer.vision.marker
        requests = [
            (f"What is on screen? {marker}", [shots[0]]),
            (f"Before: {marker} After: {marker} What changed?", [shots[1], shots[2]]),
            (f"{marker}Click the button.", [shots[2]]),
        ]
        prompts = [_vlm_prompt(trainer.vision, trainer.tokenizer, t, s) for t, s in requests]

        async def rollouts(version: str) -> list[Sample]:
            samples = []
            for i, (ids, shown) in enumerate(prompts):
                sent = [PromptImage(images[im.sha256], "image/png", im.sha256) for im in shown]
                out, logprobs = await _generate(
                    engine, ids, sent, max_tokens=16, temperature=0.7, seed=i
                )
                assert out and len(out) == len(logprobs)
                s = _vlm_sample(f"{version}-{i}", (ids, shown), out)
                s.logprobs = logprobs
                samples.append(s)
            return samples

        samples = await rollouts("v0")
        engine_lp = [s.logprobs for s in samples]
        mine = trainer.token_logprobs(samples, images)
        diff = _max_diff(engine_lp, mine)
        bf16_diff = _max_diff(engine_lp, auto.token_logprobs(samples, images))
        blind = [_sample(s.rollout_id, s.prompt_ids, s.response_ids) for s in samples]
        no_pixels = _max_diff(engine_lp, trainer.token_logprobs(blind))  # ids alone
        print(f"{name} engine (fp32) vs trainer on the GPU, T=0.7, "
              f"{sum(map(len, engine_lp))} tokens: fp32 {diff:.2e}, auto (bf16) "
              f"{bf16_diff:.2e}; without the pixels {no_pixels:.2e}")  # fmt: skip
        assert diff < 1e-3
        assert bf16_diff < 0.05  # bf16 logits; far inside GRPO's clip range (0.8, 1.28)
        assert no_pixels > 10 * max(diff, 1e-4)  # the pixels reached both
        adv = {s.rollout_id: (1.0 if i % 2 else -1.0) for i, s in enumerate(samples)}
        result = trainer.train_step(samples, adv, images)
        assert result.accepted, result.reason
        assert result.metrics["micro_batches"] == len(samples)
        assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
        assert result.metrics["clip_fraction"] == 0.0
        assert result.metrics["mismatch_abs_logprob"] < 1e-3
        moved = _max_diff(mine, trainer.token_logprobs(samples, images))
        # the updated VLM, exported from the GPU and loaded by the engine
        await engine.update_weights(str(trainer.export_weights(tmp_path / "v1")), "v1")
        assert engine.info().weight_version == "v1"
        samples = await rollouts("v1")
        diff = _max_diff([s.logprobs for s in samples], trainer.token_logprobs(samples, images))
        print(f"{name} engine vs trainer after a weight update (logprobs moved by "
              f"{moved:.2e}): {diff:.2e}")  # fmt: skip
        assert moved > 1e-2  # the update is not trivially small
        assert diff < 1e-3
    finally:
        await engine.close()


# --- gradient checkpointing ---------------------------------------------------------------


def _gc_batch(
    trainer: Trainer,
) -> tuple[list[Sample], dict[str, float], dict[str, bytes]]:
    """The mixed text batch for a text model; two samples that show images for a VLM."""
    if trainer.vision is None:
        samples, adv = _mixed_batch()
        return samples, adv, {}
    one, two = _screenshot(20), _screenshot(21, (400, 640))
    marker = trainer.vision.marker
    prompt = _vlm_prompt(trainer.vision, trainer.tokenizer, f"A {marker} B {marker}", [one, two])
    samples = [
        _vlm_sample("x", prompt, [100, 101, 102, 2]),
        _vlm_sample("y", prompt, [200, 201, 2]),
    ]
    return samples, {"x": 1.0, "y": -1.0}, _image_bytes(one, two)


@pytest.mark.parametrize("dtype", ["auto", "float32"])
@pytest.mark.parametrize("name", ["tiny", "tiny-qwen2.5-vl"])
def test_gradient_checkpointing_gives_the_same_update(name: str, dtype: str) -> None:
    # Checkpointed layers drop their activations and recompute them in the backward pass,
    # under the autocast state the forward ran with. Both runs share no prefix (a
    # checkpointed layer cannot take a cache), so checkpointing is the only difference.
    path = resolve_model(name)
    lr = 1e-3
    runs: list[tuple[list[Sample], dict[str, float], torch.Tensor, torch.Tensor, Any]] = []
    for checkpointing in (False, True):
        cfg = TrainConfig(
            model=str(path), dtype=dtype, learning_rate=lr,  # type: ignore[arg-type]
            gradient_checkpointing=checkpointing, share_prefix=False,
        )  # fmt: skip
        trainer = Trainer(cfg, path, device=GPU)
        assert trainer.model.is_activation_checkpointing is checkpointing
        assert trainer.dtype is (torch.bfloat16 if dtype == "auto" else torch.float32)
        samples, adv, images = _gc_batch(trainer)
        if not runs:
            _on_policy(trainer, samples, images)  # both train on the same rollout logprobs
        else:
            for s, first in zip(samples, runs[0][0], strict=True):
                s.logprobs = list(first.logprobs)
        calls: list[int] = []
        # The layer's forward is checkpointed: its modules run again in the recompute (which
        # stops once it saved what the backward needs, so count the MLP's entries).
        mlp = trainer.model.get_decoder().layers[0].mlp
        hook = mlp.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        grads: list[torch.Tensor] = []
        _snapshot_grads(trainer, grads)
        result = trainer.train_step(samples, adv, images)
        hook.remove()
        assert result.accepted, result.reason
        batches = int(result.metrics["micro_batches"])
        assert len(calls) == batches * (2 if checkpointing else 1)
        weights = torch.cat([p.detach().flatten() for p in trainer.params.values()]).cpu()
        after = trainer.token_logprobs(samples, images)
        runs.append((samples, result.metrics, grads[0], weights, after))
    (_, m, g, w, lp), (_, m_gc, g_gc, w_gc, lp_gc) = runs
    rel_grad = float((g_gc - g).norm() / g.norm())
    moved = float((w_gc - w).abs().max()) / lr
    off = float(((w_gc - w).abs() > 0.1 * lr).float().mean())
    print(f"{name} {dtype}: loss {m['loss']:.7f} vs checkpointed {m_gc['loss']:.7f}, grad "
          f"norm {m['grad_norm']:.5f} vs {m_gc['grad_norm']:.5f}, |dg|/|g| {rel_grad:.2e}, "
          f"weights max diff {moved:.2e} lr ({off:.2e} of them > 0.1 lr), logprobs after "
          f"{_max_diff(lp, lp_gc):.2e}")  # fmt: skip
    assert float(g.norm()) > 1e-3  # a real gradient
    if dtype == "float32":
        for key in ("loss", "pg_loss", "grad_norm", "ratio_mean"):
            assert m_gc[key] == pytest.approx(m[key], rel=1e-5, abs=1e-7), key
        assert rel_grad < 1e-5
        # AdamW's first step moves a weight by about ±lr whatever its gradient's size, so a
        # gradient within summation noise of 0 may flip its step: counted, not bounded.
        assert off < 1e-4
        assert _max_diff(lp, lp_gc) < 1e-4
    else:
        # The recompute runs the forward's bf16 kernels on the same inputs; what differs is
        # at most the order of a backward kernel's float32 sums (atomics): gradients agree
        # to well within bf16's 2^-8, and near-zero gradients may flip their AdamW sign.
        for key in ("loss", "pg_loss", "grad_norm", "ratio_mean"):
            assert m_gc[key] == pytest.approx(m[key], rel=1e-3, abs=1e-6), key
        assert rel_grad < 1e-2
        assert off < 1e-2
        assert _max_diff(lp, lp_gc) < 1e-2
