"""The built-in trainer on the `tiny` model: the update moves probabilities the right way."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from openforge.engines.local import LocalEngine
from openforge.traces.samples import Sample
from openforge.training import trainer as trainer_module
from openforge.training.advantages import grpo_advantages
from openforge.training.batching import TrainItem, make_micro_batches, split_updates
from openforge.training.config import TrainConfig
from openforge.training.trainer import Trainer

from .samples import sample as _sample


def _on_policy(trainer: Trainer, samples: list[Sample]) -> None:
    """Record the model's own logprobs as the rollout logprobs (an exactly on-policy batch)."""
    for s in samples:
        s.logprobs = [0.0] * len(s.response_ids)
        per_token = []
        for j in range(len(s.response_ids)):
            probe = _sample("probe", s.prompt_ids + s.response_ids[:j], [s.response_ids[j]])
            per_token.append(trainer.sequence_logprobs([probe])[0])
        s.logprobs = per_token


def test_one_update_raises_rewarded_and_lowers_penalised(tiny: Path) -> None:
    cfg = TrainConfig(model=str(tiny), learning_rate=1e-3, max_grad_norm=1.0)
    trainer = Trainer(cfg, tiny, device="cpu")
    prompt = [1, 42, 43, 44, 45]
    good = _sample("good", prompt, [100, 101, 102, 2])
    bad = _sample("bad", [*prompt, 7, 8], [200, 201, 2])  # different lengths: padding is exercised
    _on_policy(trainer, [good, bad])
    before = trainer.sequence_logprobs([good, bad])
    assert before == pytest.approx([sum(good.logprobs), sum(bad.logprobs)], abs=1e-4)
    adv = grpo_advantages([("g", "good", 1.0), ("g", "bad", 0.0)], scale="none")
    result = trainer.train_step([good, bad], adv.advantages)
    assert result.accepted and result.version == 1
    # on-policy: every ratio is 1, nothing clipped or truncated
    assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert result.metrics["clip_fraction"] == 0.0
    assert "kl" not in result.metrics  # no reference model without kl_coef: KL not measured
    after = trainer.sequence_logprobs([good, bad])
    assert after[0] > before[0]
    assert after[1] < before[1]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_kl_is_measured_against_the_reference_once_the_policy_moves(tiny: Path, dtype: str) -> None:
    # bf16: the reference is loaded as the policy's float32 masters are and runs under the
    # same autocast, so it is the policy until the policy moves (a bf16 copy is not).
    cfg = TrainConfig(
        model=str(tiny), learning_rate=1e-2, max_grad_norm=1.0, kl_coef=0.01, dtype=dtype
    )  # type: ignore[arg-type]
    trainer = Trainer(cfg, tiny, device="cpu")
    good = _sample("good", [1, 42, 43], [100, 101, 2])
    bad = _sample("bad", [1, 42, 44], [200, 201, 2])
    adv = grpo_advantages([("g", "good", 1.0), ("g", "bad", 0.0)], scale="none")
    _on_policy(trainer, [good, bad])
    first = trainer.train_step([good, bad], adv.advantages)
    assert first.metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # still the reference's weights
    _on_policy(trainer, [good, bad])
    second = trainer.train_step([good, bad], adv.advantages)
    assert second.metrics["kl"] > 1e-6


def test_the_reference_moves_to_where_grpo_starts_and_survives_a_checkpoint(
    tiny: Path, tmp_path: Path
) -> None:
    """After a warm-up the reference is reset to the warmed-up policy (KL 0 again), and a
    checkpoint written later restores that reference, not the base model."""
    cfg = TrainConfig(model=str(tiny), learning_rate=1e-2, max_grad_norm=1.0, kl_coef=0.01)
    trainer = Trainer(cfg, tiny, device="cpu")
    good = _sample("good", [1, 42, 43], [100, 101, 2])
    bad = _sample("bad", [1, 42, 44], [200, 201, 2])
    adv = grpo_advantages([("g", "good", 1.0), ("g", "bad", 0.0)], scale="none")
    _on_policy(trainer, [good, bad])
    trainer.train_step([good, bad], adv.advantages)  # stands for the SFT warm-up
    _on_policy(trainer, [good, bad])
    assert trainer.train_step([good, bad], adv.advantages).metrics["kl"] > 1e-6  # base: drift
    trainer.reset_reference()
    _on_policy(trainer, [good, bad])
    assert trainer.train_step([good, bad], adv.advantages).metrics["kl"] == pytest.approx(
        0.0, abs=1e-6
    )
    trainer.save_checkpoint(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "reference.safetensors").is_file()
    resumed = Trainer(cfg, tiny, device="cpu")
    resumed.load_checkpoint(tmp_path / "ckpt")
    # the reference is the policy of one update before the checkpoint: some KL, and the
    # same as the original trainer measures at these weights
    _on_policy(resumed, [good, bad])
    _on_policy(trainer, [good, bad])
    assert resumed.train_step([good, bad], adv.advantages).metrics["kl"] == pytest.approx(
        trainer.train_step([good, bad], adv.advantages).metrics["kl"], rel=1e-3, abs=1e-7
    )
    # without kl_coef there is no reference to move or keep
    plain = Trainer(TrainConfig(model=str(tiny)), tiny, device="cpu")
    plain.reset_reference()
    plain.save_checkpoint(tmp_path / "plain")
    assert not (tmp_path / "plain" / "reference.safetensors").exists()


def test_accumulation_matches_one_batch(tiny: Path) -> None:
    prompt = [1, 50, 51]
    samples = [_sample(f"r{i}", prompt + [60 + i] * i, [70 + i, 2]) for i in range(4)]
    adv = {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5}
    grads = []
    for budget in (1 << 20, 8):  # one pass vs one sample per pass
        cfg = TrainConfig(model=str(tiny), micro_batch_tokens=budget, learning_rate=1e-3)
        trainer = Trainer(cfg, tiny, device="cpu")
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        result = trainer.train_step(samples, adv)
        assert result.metrics["micro_batches"] == (1 if budget > 8 else 4)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params.values()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"lora": True, "lora_rank": 4},
        {"kl_coef": 0.1},
        {"train_layers": 1},
        {"gradient_checkpointing": True},  # shares nothing: the layers would drop the cache
    ],
    ids=["full", "lora", "reference", "top-layer", "checkpointing"],
)
def test_a_shared_prefix_gives_the_gradient_of_whole_rows(
    tiny: Path, options: dict[str, object]
) -> None:
    # Rows that start with the same 40 ids run them once (batching.make_micro_batches);
    # the same micro-batch with every row whole must give the same update.
    system = list(range(300, 340))
    samples = [
        _sample(f"r{i}", [*system, 50 + i, *([60 + i] * i)], [70 + i, 71, 2][: 1 + i % 3])
        for i in range(5)
    ]
    adv = {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5, "r4": 0.25}
    items = [TrainItem(s, adv[s.rollout_id]) for s in samples]
    (shared,) = make_micro_batches(items, 1 << 20, 0)
    assert shared.shared == 40
    grads, metrics = [], []
    for share in (True, False):
        cfg = TrainConfig(model=str(tiny), share_prefix=share, **options)  # type: ignore[arg-type]
        trainer = Trainer(cfg, tiny, device="cpu")
        if share:  # ratios near 1, so the gradient is not clipped to almost nothing
            _on_policy(trainer, samples)
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        result = trainer.train_step(samples, adv)
        assert result.metrics["micro_batches"] == 1
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params.values()]))
        metrics.append(result.metrics)
    scale = float(grads[1].abs().max())
    assert scale > 1e-3  # the update is not trivially zero
    # Only the order of float32 sums differs (attention over cached keys).
    assert torch.allclose(grads[0], grads[1], atol=1e-5 * scale, rtol=1e-3)
    for key in ("loss", "ratio_mean", "entropy", "mismatch_abs_logprob"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("options", [{}, {"lora": True, "lora_rank": 4}], ids=["full", "lora"])
def test_projecting_only_trained_positions_gives_the_models_own_update(
    tiny: Path, options: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A llama-family model's LM head runs on the loss mask's positions only; the model's
    # own forward (every response position projected) must give the same update. The
    # masks have holes, as a merged rollout's tool results do.
    samples = [
        _sample(f"r{i}", [1, 40 + i, 41, 42][: 2 + i % 3], [50 + i, 51, 52, 53, 2][: 3 + i % 3])
        for i in range(4)
    ]
    for i, s in enumerate(samples):
        s.loss_mask = [1, 0, 1, 1, 1][: len(s.response_ids)] if i % 2 else [1] * len(s.response_ids)
    adv = {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5}
    grads, metrics = [], []
    for heads in (trainer_module._PLAIN_HEADS, frozenset()):
        monkeypatch.setattr(trainer_module, "_PLAIN_HEADS", heads)
        cfg = TrainConfig(model=str(tiny), temperature=0.7, **options)  # type: ignore[arg-type]
        trainer = Trainer(cfg, tiny, device="cpu")
        if heads:
            _on_policy(trainer, samples)
        trainer.optimizer.step = lambda *a, **k: None  # type: ignore[method-assign]
        trainer.optimizer.zero_grad = lambda *a, **k: None  # type: ignore[method-assign]
        metrics.append(trainer.train_step(samples, adv).metrics)
        grads.append(torch.cat([p.grad.flatten() for p in trainer.params.values()]))
    scale = float(grads[1].abs().max())
    assert scale > 1e-3
    assert torch.allclose(grads[0], grads[1], atol=1e-5 * scale, rtol=1e-3)
    for key in ("loss", "ratio_mean", "entropy", "mismatch_abs_logprob"):
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-4, abs=1e-6), key


def test_nan_loss_rejects_the_step(tiny: Path) -> None:
    trainer = Trainer(TrainConfig(model=str(tiny)), tiny, device="cpu")
    s = _sample("a", [1, 5, 6], [9, 2])
    s.logprobs = [math.nan, 0.0]
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    result = trainer.train_step([s], {"a": 1.0})
    assert not result.accepted and result.version == 0
    assert result.reason is not None and "non-finite" in result.reason
    assert all(torch.equal(before[n], p) for n, p in trainer.params.items())


def test_checkpoint_resume_restores_weights_and_optimizer(tiny: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(model=str(tiny), learning_rate=1e-3)
    a = Trainer(cfg, tiny, device="cpu")
    s = [_sample("x", [1, 9, 10], [11, 2]), _sample("y", [1, 9, 10], [12, 2])]
    adv = {"x": 1.0, "y": -1.0}
    a.train_step(s, adv)
    a.save_checkpoint(tmp_path / "ckpt", extra={"step": 1})
    b = Trainer(cfg, tiny, device="cpu")
    assert b.load_checkpoint(tmp_path / "ckpt") == {"step": 1}
    assert b.version == 1
    a.train_step(s, adv)
    b.train_step(s, adv)  # same state in → same weights out
    for name, p in a.params.items():
        assert torch.allclose(p, b.params[name], atol=1e-6), name


def test_lora_update_and_merged_export(tiny: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(model=str(tiny), lora=True, lora_rank=4, learning_rate=1e-2)
    trainer = Trainer(cfg, tiny, device="cpu")
    assert all("lora_" in n for n in trainer.params)
    s = [_sample("x", [1, 9, 10], [11, 2]), _sample("y", [1, 9, 10], [12, 2])]
    assert trainer.train_step(s, {"x": 1.0, "y": -1.0}).accepted
    out = trainer.export_weights(tmp_path / "v1")
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert not any("lora" in k for k in load_file(str(out / "model.safetensors")))


def test_ratio_is_one_on_policy_under_a_sampling_temperature(tiny: Path) -> None:
    cfg = TrainConfig(model=str(tiny), learning_rate=1e-3, temperature=0.7)
    trainer = Trainer(cfg, tiny, device="cpu")
    prompt, response = [1, 42, 43, 44], [100, 101, 102, 2]
    with torch.no_grad():
        logits = trainer.model(torch.tensor([prompt + response])).logits[0].float()
    # the engine reports logprobs of the tempered distribution it sampled from
    tempered = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, -1)
    sample = _sample("a", prompt, response)
    sample.logprobs = tempered.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist()
    other = _sample("b", prompt, [7, 2])
    with torch.no_grad():
        tail = torch.log_softmax(
            trainer.model(torch.tensor([[*prompt, 7, 2]])).logits[0, len(prompt) - 1 : -1] / 0.7, -1
        )
    other.logprobs = tail.gather(-1, torch.tensor([7, 2])[:, None])[:, 0].tolist()
    result = trainer.train_step([sample, other], {"a": 1.0, "b": -1.0})
    assert result.accepted
    assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_updates_per_step_are_successive_updates_on_the_shares(tiny: Path) -> None:
    samples = [_sample(f"r{i}", [1, 50, 51, 52 + i], [70 + i, 71, 2]) for i in range(5)]
    adv = {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5, "r4": 0.25}
    split = Trainer(TrainConfig(model=str(tiny), learning_rate=1e-3, updates_per_step=2), tiny)
    result = split.train_step(samples, adv)
    assert result.accepted and result.version == 1 and result.metrics["updates"] == 2
    assert result.metrics["samples"] == 5
    # The same two updates made one per step, on the shares split_updates deals
    one = Trainer(TrainConfig(model=str(tiny), learning_rate=1e-3), tiny)
    items = [TrainItem(s, adv[s.rollout_id]) for s in samples]
    shares = split_updates(items, 2, "0:0")
    assert sorted(len(s) for s in shares) == [2, 3]
    assert {it.sample.rollout_id for s in shares for it in s} == set(adv)
    assert shares[0] != items[: len(shares[0])] or shares[1] != items[len(shares[0]) :]
    for share in shares:
        assert one.train_step([it.sample for it in share], adv).accepted
    for name, p in split.params.items():
        assert torch.allclose(p, one.params[name], atol=1e-6), name


def test_a_bad_later_update_keeps_the_earlier_ones(tiny: Path) -> None:
    samples = [_sample(f"r{i}", [1, 50, 51], [70 + i, 2]) for i in range(2)]
    adv = {"r0": 1.0, "r1": -1.0}
    trainer = Trainer(TrainConfig(model=str(tiny), learning_rate=1e-3, updates_per_step=2), tiny)
    _on_policy(trainer, samples)  # so neither update is clipped to a zero gradient
    shares = split_updates([TrainItem(s, adv[s.rollout_id]) for s in samples], 2, "0:0")
    on_policy = [list(share[0].sample.logprobs) for share in shares]
    shares[1][0].sample.logprobs = [math.nan, 0.0]  # NaN only in the second update
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    result = trainer.train_step(samples, adv)
    assert result.accepted and result.version == 1
    assert result.metrics["updates"] == 1 and result.metrics["updates_rejected"] == 1
    assert result.reason is not None and "non-finite" in result.reason
    assert any(not torch.equal(before[n], p) for n, p in trainer.params.items())
    # NaN in the first update: nothing applied, the step is rejected
    shares[1][0].sample.logprobs, shares[0][0].sample.logprobs = on_policy[1], [math.nan, 0.0]
    fresh = Trainer(TrainConfig(model=str(tiny), learning_rate=1e-3, updates_per_step=2), tiny)
    assert not fresh.train_step(samples, adv).accepted and fresh.version == 0


def _changed_fraction(before: dict[str, torch.Tensor], trainer: Trainer) -> float:
    changed = sum(int((before[n] != p.detach()).sum()) for n, p in trainer.params.items())
    return changed / sum(int(p.numel()) for p in trainer.params.values())


def test_bf16_computes_in_bf16_and_updates_float32_master_weights(
    tiny: Path, tmp_path: Path
) -> None:
    # An AdamW step moves a weight by about the learning rate (1e-5 by default), far below
    # one bf16 step at the weights' size: bf16 weights updated in place keep almost none
    # of it. The trained weights are float32 masters; only the compute is bf16.
    trainer = Trainer(TrainConfig(model=str(tiny), dtype="bfloat16"), tiny, device="cpu")
    assert trainer.dtype is torch.bfloat16  # the compute dtype
    assert trainer.params and all(p.dtype is torch.float32 for p in trainer.params.values())
    computed: dict[str, set[torch.dtype]] = {"q_proj": set(), "lm_head": set()}
    decoder = trainer.model.get_decoder()
    decoder.layers[0].self_attn.q_proj.register_forward_hook(
        lambda m, a, out: computed["q_proj"].add(out.dtype)
    )
    trainer.model.get_output_embeddings().register_forward_hook(
        lambda m, a, out: computed["lm_head"].add(out.dtype)
    )
    prompt = [1, 42, 43, 44, 45]
    samples = [_sample("good", prompt, [100, 101, 102, 2]), _sample("bad", prompt, [200, 2])]
    _on_policy(trainer, samples)
    before = {n: p.detach().clone() for n, p in trainer.params.items()}
    result = trainer.train_step(samples, {"good": 1.0, "bad": -1.0})
    assert result.accepted, result.reason
    assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=0.05)
    assert computed == {"q_proj": {torch.bfloat16}, "lm_head": {torch.bfloat16}}
    assert all(p.dtype is torch.float32 for p in trainer.params.values())
    assert _changed_fraction(before, trainer) > 0.5  # about 0.92 here, as in float32
    # The engine is sent the compute dtype: the masters rounded once, tied weights once.
    out = trainer.export_weights(tmp_path / "v1")
    state = load_file(str(out / "model.safetensors"))
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    masters = dict(trainer.model.state_dict())
    assert set(state) < set(masters)  # lm_head.weight is the tied embedding
    for name, t in state.items():
        assert torch.equal(t, masters[name].to(torch.bfloat16)), name


def test_a_checkpoint_with_bf16_moments_resumes_in_float32(tiny: Path, tmp_path: Path) -> None:
    # A trainer that kept bf16 weights wrote bf16 weights and AdamW moments; a float32
    # trainer must take them in its own dtype (AdamW's update mixes moments and gradients).
    cfg = TrainConfig(model=str(tiny), learning_rate=1e-3)
    s = [_sample("x", [1, 9, 10], [11, 2]), _sample("y", [1, 9, 10], [12, 2])]
    adv = {"x": 1.0, "y": -1.0}
    a = Trainer(cfg, tiny, device="cpu")
    assert a.train_step(s, adv).accepted
    as_saved = a.save_checkpoint(tmp_path / "as-saved", extra={"step": 1})
    ckpt = shutil.copytree(as_saved, tmp_path / "bf16")
    for file in ("trainable.safetensors", "optimizer.safetensors"):
        tensors = load_file(str(ckpt / file))
        bf16 = {k: v if k.endswith("::step") else v.to(torch.bfloat16) for k, v in tensors.items()}
        save_file(bf16, str(ckpt / file))
    moments = load_file(str(ckpt / "optimizer.safetensors"))
    assert any(v.dtype is torch.bfloat16 for v in moments.values())
    b = Trainer(cfg, tiny, device="cpu")
    assert b.load_checkpoint(ckpt) == {"step": 1}
    for name, p in b.params.items():
        assert p.dtype is torch.float32, name
        state = b.optimizer.state[p]
        assert set(state) == {"step", "exp_avg", "exp_avg_sq"}, name
        for key in ("exp_avg", "exp_avg_sq"):
            assert state[key].dtype is torch.float32 and state[key].device == p.device
            assert torch.equal(state[key], moments[f"{name}::{key}"].float()), (name, key)
        step = a.optimizer.state[a.params[name]]["step"]
        assert state["step"].dtype == step.dtype and state["step"].device == step.device
    before = {n: p.detach().clone() for n, p in b.params.items()}
    result = b.train_step(s, adv)
    assert result.accepted, result.reason
    assert _changed_fraction(before, b) > 0.1
    # the same update as from the float32 checkpoint, up to the bf16 rounding of its state
    c = Trainer(cfg, tiny, device="cpu")
    c.load_checkpoint(as_saved)
    assert c.train_step(s, adv).accepted
    for name, p in b.params.items():
        assert torch.allclose(p, c.params[name], atol=1e-2), name


async def test_the_trainer_and_the_engine_build_their_models_without_hub_kernels(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers 5 kernelizes a model by default (use_kernels) and kernelizes it again
    # when it is put in training mode: on CUDA it fetches and runs kernels from the Hub.
    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)  # the environment's default
    trainer = Trainer(TrainConfig(model=str(tiny), kl_coef=0.1), tiny, device="cpu")
    assert trainer.model.training
    for model in (trainer.model, trainer.ref_model):
        assert model.use_kernels is False and model.kernels_mode is None
    engine = LocalEngine("tiny", device="cpu", threads=1)
    try:
        assert engine.model.use_kernels is False and engine.model.kernels_mode is None
    finally:
        await engine.close()
