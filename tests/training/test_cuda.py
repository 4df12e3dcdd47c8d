"""The trainer and the local engine on a CUDA device, on the `tiny` model.

Skipped where torch sees no CUDA device. What runs here: no model fetches Hub kernels;
``dtype: auto`` computes in bf16 on the GPU and updates float32 master weights, so an update
at the default learning rate is kept; float32 on the GPU gives the CPU's logprobs, loss and
gradient; the logprobs the
local engine records on the GPU are the ones the trainer recomputes there (GRPO's
importance ratio is their difference), also after a weight update exported from the GPU;
checkpoints and LoRA exports written from GPU tensors load again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from openforge.conversation import SamplingParams
from openforge.engines.base import EngineRequest
from openforge.engines.local import LocalEngine
from openforge.models.registry import resolve_model
from openforge.traces.samples import Mode, Sample
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer

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


def _sample(rollout_id: str, prompt: list[int], response: list[int]) -> Sample:
    return Sample(
        rollout_id=rollout_id, task_id="t", group_id="g", reward=None, status="completed",
        mode=Mode.PER_CALL, prompt_ids=prompt, response_ids=response,
        loss_mask=[1] * len(response), logprobs=[0.0] * len(response),
        call_ids=["c-" + rollout_id], spans=[("c-" + rollout_id, 0, len(response))],
        weight_versions=["0"],
    )  # fmt: skip


@pytest.fixture(scope="module")
def tiny() -> Path:
    return resolve_model("tiny")


def _on_policy(trainer: Trainer, samples: list[Sample]) -> None:
    """Record the trainer's own logprobs as the rollout logprobs (0 where not trained)."""
    for s, row in zip(samples, trainer.token_logprobs(samples), strict=True):
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
    changed = sum(int((before[n] != p.detach()).sum()) for n, p in trainer.params.items())
    total = sum(int(p.numel()) for p in trainer.params.values())
    return changed / total


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


async def _generate(
    engine: LocalEngine, prompt: list[int], **params: object
) -> tuple[list[int], list[float]]:
    ids: list[int] = []
    logprobs: list[float] = []
    request = EngineRequest(prompt_ids=prompt, params=SamplingParams(**params))  # type: ignore[arg-type]
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
