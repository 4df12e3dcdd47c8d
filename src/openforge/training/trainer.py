"""The built-in trainer: a transformers causal LM updated with the GRPO loss of ``losses.py``.

Full fine-tuning or LoRA (peft); AdamW; gradient clipping; gradient accumulation over
micro-batches of at most ``micro_batch_tokens`` padded tokens, each normalised by the
whole update's token (or sample) count so accumulation does not change the update; a step
makes ``updates_per_step`` updates, each on its share of the step's shuffled samples. A
step whose first update has a NaN/inf loss or gradient norm is rejected: no optimizer step,
the weight version does not advance, nothing is pushed.

Mixed precision: ``dtype`` (``pick_dtype``) is the compute dtype. The trained weights are
float32 master weights whatever it is, and with bf16 the forward passes run under
``torch.autocast``: an AdamW update at a small learning rate (1e-5 moves a weight by about
that) is far below one bf16 step of the weight, so bf16 weights updated in place would keep
almost none of it. A LoRA base is frozen and stays in the compute dtype (the reference
model is loaded as the policy's weights are). Exported weights are written in the compute
dtype, the size the engines were sent before.

Checkpoints are safetensors: the trainable weights, the AdamW moments, and a small JSON
with the step and version, so a resumed run continues exactly.

A vision-language model directory (Qwen2.5-VL / Qwen3-VL: ``preprocessor_config.json``
and the vision tokens) is loaded as an image-text model: a sample that shows images runs
alone with ``pixel_values`` and ``image_grid_thw`` from the model's own image processor
(given the images' bytes by digest) and the model's own M-RoPE positions, as the local
engine ran it. A grid that differs from the one recorded at rendering time (another
processor configuration) is an error, not a silent misalignment.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import shutil
import statistics
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from openforge.conversation import ImagePart
from openforge.rendering.vision import Vision, load_vision
from openforge.training.batching import (
    MicroBatch,
    TrainableSample,
    TrainItem,
    make_micro_batches,
    split_updates,
)
from openforge.training.config import TrainConfig
from openforge.training.losses import entropy_from_logits, policy_loss, token_logprobs

__all__ = ["StepResult", "Trainer", "freeze_below", "pick_dtype"]

_STATE = "trainer_state.json"
_WEIGHTS = "trainable.safetensors"
_OPTIM = "optimizer.safetensors"
_REFERENCE = "reference.safetensors"  # the KL's reference, when it is not the base model
# Causal LMs whose logits are the LM head applied to the decoder's last hidden state and
# nothing more (no soft-capping or scaling): the trainer projects only the trained
# positions of these; any other model goes through its own forward.
_PLAIN_HEADS = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def pick_dtype(choice: str, device: torch.device) -> torch.dtype:
    """The compute dtype: bf16 on a CUDA device that supports it when ``auto``; float32 on
    CPU. The trained weights are float32 master weights either way (bf16 runs the forward
    passes under autocast)."""
    if choice == "bfloat16":
        return torch.bfloat16
    if choice == "float32":
        return torch.float32
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def freeze_below(model: Any, top: int) -> None:
    """Leave only the top ``top`` decoder layers and the final norm trainable.

    Nothing below the first trainable layer then requires grad, so autograd records no
    graph there: those layers cost one plain forward pass and keep no activations. In a
    vision-language model the decoder is ``model.language_model`` and the vision tower
    stays frozen too.
    """
    inner = getattr(model, "model", None)
    inner = getattr(inner, "language_model", inner)  # Qwen-VL: model.language_model.layers
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError("train_layers needs a decoder with model.layers (Llama-style)")
    model.requires_grad_(False)
    for layer in list(layers)[-top:]:
        layer.requires_grad_(True)
    norm = getattr(inner, "norm", None)
    if norm is not None:
        norm.requires_grad_(True)


@dataclass(slots=True)
class StepResult:
    """What one update did. ``accepted`` is False when it was rejected (non-finite)."""

    accepted: bool
    version: int
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None


@dataclass(slots=True)
class _Update:
    """One applied optimizer update of a step: what it trained and its summed statistics."""

    items: list[TrainItem]
    trained_tokens: float
    loss: float
    grad_norm: float
    totals: dict[str, float]  # token-weighted sums (pg_loss: the update's own loss term)
    micro_batches: int


class Trainer:
    """Owns the policy model, its optimizer and (with ``kl_coef > 0``) a frozen reference."""

    def __init__(
        self, config: TrainConfig, model_path: str | Path, device: str | None = None
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        self.config = config
        self.model_path = Path(model_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = pick_dtype(config.dtype, self.device)  # compute dtype (autocast when bf16)
        if config.threads:
            torch.set_num_threads(config.threads)
        torch.manual_seed(config.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_path))
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id or 0)
        self.vision: Vision | None = load_vision(self.model_path, self._token_id)
        auto: Any = AutoModelForImageTextToText if self.vision else AutoModelForCausalLM
        # Float32 master weights for the trained ones: twice the parameter memory of bf16
        # weights, the usual mixed-precision trade (AdamW's moments are float32 anyway). A
        # LoRA base is frozen: it stays in the compute dtype, its adapters are float32.
        self.weights_dtype = self.dtype if config.lora else torch.float32
        # use_kernels=False: transformers 5 otherwise kernelizes the model and, put in
        # training mode on CUDA, fetches and runs Hub kernels the engine never runs.
        base: Any = auto.from_pretrained(
            str(self.model_path), dtype=self.weights_dtype, use_kernels=False
        )
        base.to(self.device)
        self.ref_model: Any = None
        if config.kl_coef > 0:
            # Never updated, yet loaded as the policy is: run under the same autocast, it
            # then gives the policy's logprobs until the policy moves (KL 0 at the start).
            # A bf16 copy beside float32 masters does not (its residual stream is bf16):
            # a KL of about 2.6e-3 a token before any update (tiny, SmolLM2-135M on CPU).
            self.ref_model = auto.from_pretrained(
                str(self.model_path), dtype=self.weights_dtype, use_kernels=False
            )
            self.ref_model.to(self.device).eval().requires_grad_(False)
        if config.lora:
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=config.lora_rank,
                lora_alpha=config.lora_alpha,
                lora_dropout=config.lora_dropout,
                target_modules=list(config.lora_target_modules),
                task_type="CAUSAL_LM",
            )
            with warnings.catch_warnings():
                # peft reads a property transformers 5 deprecated; nothing for us to change.
                warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
                self.model: Any = get_peft_model(base, lora)
        else:
            self.model = base
        if config.train_layers and not config.lora:
            freeze_below(base, config.train_layers)
        if config.gradient_checkpointing:
            self.model.activation_checkpointing_enable()
        self.model.train()
        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        for p in self.params.values():  # float32 masters (peft upcasts LoRA adapters too)
            if p.dtype != torch.float32:
                p.data = p.data.float()
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()),
            lr=config.learning_rate,
            betas=(config.adam_beta1, config.adam_beta2),
            weight_decay=config.weight_decay,
        )
        self.step_count = 0  # accepted updates
        self.version = 0  # weight version of the current weights (bumped per accepted update)
        self.reference_moved = False  # the reference holds weights other than the base's

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward passes' mixed precision: autocast to the compute dtype when it is
        not float32 (the weights are float32 masters), nothing otherwise."""
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def _token_id(self, token: str) -> int | None:
        found = self.tokenizer.convert_tokens_to_ids(token)
        unk = self.tokenizer.unk_token_id
        if not isinstance(found, int) or (unk is not None and found == unk):
            return None
        return found

    # --- the update -------------------------------------------------------------------

    def _vision_inputs(self, mb: MicroBatch, images: Mapping[str, bytes]) -> dict[str, Any]:
        """``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids`` for a one-sample
        batch that shows images (positions then come from the model: M-RoPE)."""
        shown = mb.items[0].sample.images
        if self.vision is None:
            raise ValueError(f"{self.model_path} is not a VLM, but a sample shows images")
        missing = [i.sha256 for i in shown if i.sha256 not in images]
        if missing:
            raise ValueError(f"a sample shows image sha256:{missing[0]}; its bytes are missing")
        parts = [ImagePart("", i.media_type, data=images[i.sha256], sha256=i.sha256) for i in shown]
        pixels, grids = self.vision.inputs(parts)
        recorded = [i.grid_thw for i in shown]
        if grids != recorded:
            raise ValueError(
                f"the image processor gives grids {grids}, the calls recorded {recorded}: "
                "train with the processor settings the gateway rendered with"
            )
        ids = mb.input_ids.to(self.device)
        return {
            # the weights' dtype; autocast runs the vision tower in the compute dtype
            "pixel_values": pixels.to(self.device, self.weights_dtype),
            "image_grid_thw": torch.tensor(grids, device=self.device),
            "mm_token_type_ids": (ids == self.vision.pad_id).long(),
        }

    def _forward(
        self,
        model: Any,
        mb: MicroBatch,
        want_entropy: bool,
        temperature: float = 1.0,
        images: Mapping[str, bytes] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each response position's logprob of its token (and entropy), ``[B, R]``; only
        positions the loss mask keeps are meaningful (the rest may be 0).

        The model runs under :meth:`_autocast`; its logits are upcast to float32 before
        the temperature and the softmax (``losses.py`` computes in float32)."""
        r = mb.response_width
        inputs: dict[str, Any] = {"position_ids": mb.position_ids.to(self.device)}
        if mb.items[0].sample.images:  # alone in its batch (make_micro_batches)
            inputs = self._vision_inputs(mb, images or {})
        if mb.shared:
            inputs["cache"] = self._prefix_cache(model, mb.prefix_ids, len(mb.items))
        ids = mb.input_ids.to(self.device)
        attention = mb.attention_mask.to(self.device)
        targets = mb.targets.to(self.device)
        if model.config.model_type in _PLAIN_HEADS:
            # The LM head and the softmax over the vocabulary are a third of a claw step
            # when every response position is projected; only the trained ones need it.
            keep = mb.loss_mask.to(self.device) > 0
            with self._autocast():
                out = model.get_decoder()(
                    input_ids=ids, attention_mask=attention, use_cache=bool(mb.shared), **inputs
                )
                hidden = out.last_hidden_state[:, -(r + 1) : -1]  # position k predicts k + 1
                logits = model.get_output_embeddings()(hidden[keep])[None]  # [1, N, V]
            logits = logits.float()  # the head ran in the compute dtype
            if temperature > 0 and temperature != 1.0:
                logits = logits / temperature  # the engine's logprobs are of this
            zeros = torch.zeros(keep.shape, device=self.device)
            logp = zeros.masked_scatter(keep, token_logprobs(logits, targets[keep][None]))
            if not want_entropy:
                return logp, None
            return logp, zeros.masked_scatter(keep, entropy_from_logits(logits.detach()))
        with self._autocast():
            out = model(
                input_ids=ids,
                attention_mask=attention,
                logits_to_keep=r + 1,
                use_cache=bool(mb.shared),
                **inputs,
            )
        logits = out.logits[:, :-1, :].float()  # position k predicts token k + 1
        if temperature > 0 and temperature != 1.0:
            # The engine reports logprobs of the tempered distribution it sampled from.
            logits = logits / temperature
        logp = token_logprobs(logits, targets)
        ent = entropy_from_logits(logits.detach()) if want_entropy else None
        return logp, ent

    def _prefix_cache(self, model: Any, prefix: torch.Tensor, rows: int) -> Any:
        """The keys and values of a batch's common ``prefix``, run as one row and broadcast
        to ``rows`` rows. ``expand`` makes no copy, and its backward sums the rows'
        gradients, so the update is the one a forward pass over every whole row gives."""
        positions = torch.arange(len(prefix), device=self.device)[None]
        with self._autocast():  # as the rows that continue it run
            out = model(
                input_ids=prefix[None].to(self.device),
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,  # the prefix's logits are not needed (0 would keep them all)
            )
        cache = out.cache
        for layer in cache.layers:
            layer.keys = layer.keys.expand(rows, -1, -1, -1)
            layer.values = layer.values.expand(rows, -1, -1, -1)
        return cache

    def _micro_step(
        self, mb: MicroBatch, n_tokens: float, n_seqs: float, images: Mapping[str, bytes]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        cfg = self.config
        mask = mb.loss_mask.to(self.device)
        t = self.config.temperature
        logp, ent = self._forward(self.model, mb, want_entropy=True, temperature=t, images=images)
        # Padding columns may hold garbage (fully masked attention rows); keep it out.
        logp = torch.where(mask > 0, logp, torch.zeros_like(logp))
        ref_logp = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logp, _ = self._forward(self.ref_model, mb, False, t, images)
        terms = policy_loss(
            logp,
            mb.rollout_logprobs.to(self.device),
            mb.advantages.to(self.device),
            mask,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            tis_cap=cfg.tis_cap,
            aggregation=cfg.aggregation,
            ref_logp=ref_logp,
            kl_coef=cfg.kl_coef,
            entropy=ent,
            entropy_coef=cfg.entropy_coef,
            num_tokens=n_tokens,
            num_seqs=n_seqs,
        )
        w = float(mask.sum().item())
        stats = {
            "pg_loss": float(terms.pg_loss.item()),
            "clip_fraction": float(terms.clip_fraction.item()) * w,
            "tis_fraction": float(terms.tis_fraction.item()) * w,
            "kl": float(terms.kl.item()) * w,
            "entropy": float(terms.entropy.item()) * w,
            "ratio_mean": float(terms.ratio_mean.item()) * w,
            "abs_logprob_diff": float(
                ((logp.detach() - mb.rollout_logprobs.to(self.device)).abs() * mask).sum().item()
            ),
        }
        return terms.loss, stats

    def train_step(
        self,
        samples: Sequence[TrainableSample],
        advantages: Mapping[str, float],
        images: Mapping[str, bytes] | None = None,
    ) -> StepResult:
        """One step on ``samples`` (those whose rollout has an advantage): ``updates_per_step``
        optimizer updates, each on its share of the shuffled samples.

        ``images`` maps each digest the samples show to the image's bytes (VLMs). An update
        whose loss or gradient norm is not finite is not applied, nor are the ones after it;
        the step is rejected only when no update was applied (weights unchanged), else it
        is accepted with the updates made (``updates`` in the metrics)."""
        items = [
            TrainItem(s, float(advantages[s.rollout_id]))
            for s in samples
            if s.rollout_id in advantages and s.prompt_ids and sum(s.loss_mask) > 0
        ]
        if not items:
            return StepResult(False, self.version, reason="no trainable samples")
        started = time.perf_counter()
        made: list[_Update] = []
        reason = None
        key = f"{self.config.seed}:{self.step_count}"  # a resumed run splits alike
        parts = split_updates(items, self.config.updates_per_step, key)
        for part in parts:
            update = self._update(part, images or {})
            if isinstance(update, str):
                reason = update
                break
            made.append(update)
        if not made:
            return StepResult(False, self.version, reason=reason)
        self.step_count += 1
        self.version += 1
        elapsed = time.perf_counter() - started
        n_tokens = sum(u.trained_tokens for u in made)
        total_tokens = sum(it.length for u in made for it in u.items)
        totals: dict[str, float] = {}
        for u in made:
            for k, v in u.totals.items():
                totals[k] = totals.get(k, 0.0) + v
        metrics = {
            "loss": statistics.fmean(u.loss for u in made),
            "pg_loss": totals["pg_loss"] / len(made),
            "grad_norm": statistics.fmean(u.grad_norm for u in made),
            "samples": float(sum(len(u.items) for u in made)),
            "trained_tokens": n_tokens,
            "tokens": float(total_tokens),
            "micro_batches": float(sum(u.micro_batches for u in made)),
            "updates": float(len(made)),
            "train_s": elapsed,
            "train_tokens_per_s": total_tokens / elapsed if elapsed > 0 else 0.0,
        }
        for k in ("clip_fraction", "tis_fraction", "kl", "entropy", "ratio_mean"):
            metrics[k] = totals[k] / max(n_tokens, 1.0)
        if self.ref_model is None:  # no reference (kl_coef 0): a 0 here would read as "no drift"
            del metrics["kl"]
        metrics["mismatch_abs_logprob"] = totals["abs_logprob_diff"] / max(n_tokens, 1.0)
        if len(made) < len(parts):
            metrics["updates_rejected"] = float(len(parts) - len(made))
        return StepResult(True, self.version, metrics, reason=reason)

    def _micro_batches(self, items: list[TrainItem]) -> list[MicroBatch]:
        # Gradient checkpointing drops a cache passed to the layers, and a VLM derives its
        # positions from the whole row: neither can run a shared prefix once.
        cfg = self.config
        share = cfg.share_prefix and self.vision is None and not cfg.gradient_checkpointing
        return make_micro_batches(items, cfg.micro_batch_tokens, self.pad_id, share)

    def _update(self, items: list[TrainItem], images: Mapping[str, bytes]) -> _Update | str:
        """One optimizer update on ``items`` (gradient accumulated over micro-batches, each
        normalised by the update's whole token count), or why it was not applied."""
        n_tokens = float(sum(sum(it.sample.loss_mask) for it in items))
        n_seqs = float(len(items))
        batches = self._micro_batches(items)
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        loss_sum = 0.0
        for mb in batches:
            loss, stats = self._micro_step(mb, n_tokens, n_seqs, images)
            if not torch.isfinite(loss):
                self.optimizer.zero_grad(set_to_none=True)
                return "non-finite loss"
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.item())
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v
        grad_norm = torch.nn.utils.clip_grad_norm_(
            list(self.params.values()), self.config.max_grad_norm or float("inf")
        )
        if not math.isfinite(float(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return "non-finite gradient norm"
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return _Update(items, n_tokens, loss_sum, float(grad_norm), totals, len(batches))

    def sft_step(
        self,
        samples: Sequence[TrainableSample],
        learning_rate: float,
        images: Mapping[str, bytes] | None = None,
    ) -> StepResult:
        """One supervised update: mean cross-entropy over the samples' loss-mask tokens.

        The warm-up before GRPO (teacher trajectories, ``training/teacher.py``): same
        batching and padding as :meth:`train_step`, no ratio, no advantage.
        """
        items = [TrainItem(s, 0.0) for s in samples if s.prompt_ids and sum(s.loss_mask) > 0]
        if not items:
            return StepResult(False, self.version, reason="no trainable samples")
        started = time.perf_counter()
        n_tokens = float(sum(sum(it.sample.loss_mask) for it in items))
        self.optimizer.zero_grad(set_to_none=True)
        nll = 0.0
        for mb in self._micro_batches(items):
            mask = mb.loss_mask.to(self.device)
            logp, _ = self._forward(self.model, mb, False, images=images)
            loss = -(torch.where(mask > 0, logp, torch.zeros_like(logp)) * mask).sum() / n_tokens
            if not torch.isfinite(loss):
                self.optimizer.zero_grad(set_to_none=True)
                return StepResult(False, self.version, reason="non-finite loss")
            loss.backward()  # type: ignore[no-untyped-call]
            nll += float(loss.item())
        grad_norm = torch.nn.utils.clip_grad_norm_(
            list(self.params.values()), self.config.max_grad_norm or float("inf")
        )
        if not math.isfinite(float(grad_norm)):
            self.optimizer.zero_grad(set_to_none=True)
            return StepResult(False, self.version, reason="non-finite gradient norm")
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        self.optimizer.step()
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.learning_rate
        self.optimizer.zero_grad(set_to_none=True)
        self.step_count += 1
        self.version += 1
        elapsed = time.perf_counter() - started
        total_tokens = sum(it.length for it in items)
        return StepResult(
            True,
            self.version,
            {
                "sft_loss": nll,
                "grad_norm": float(grad_norm),
                "samples": float(len(items)),
                "trained_tokens": n_tokens,
                "tokens": float(total_tokens),
                "train_s": elapsed,
                "train_tokens_per_s": total_tokens / elapsed if elapsed > 0 else 0.0,
            },
        )

    @torch.no_grad()
    def sequence_logprobs(
        self, samples: Sequence[TrainableSample], images: Mapping[str, bytes] | None = None
    ) -> list[float]:
        """Sum of the current model's logprobs over each sample's trained tokens."""
        return [sum(row) for row in self._token_logprobs(samples, images, 1.0)]

    @torch.no_grad()
    def token_logprobs(
        self, samples: Sequence[TrainableSample], images: Mapping[str, bytes] | None = None
    ) -> list[list[float]]:
        """The current model's logprob of each trained token of each sample (at the
        configured temperature), to set beside the engine's recorded ``logprobs``."""
        return self._token_logprobs(samples, images, self.config.temperature)

    def _token_logprobs(
        self,
        samples: Sequence[TrainableSample],
        images: Mapping[str, bytes] | None,
        temperature: float,
    ) -> list[list[float]]:
        was_training = self.model.training
        self.model.eval()
        out: list[list[float]] = []
        for s in samples:
            (mb,) = make_micro_batches([TrainItem(s, 0.0)], 1 << 30, self.pad_id)
            logp, _ = self._forward(self.model, mb, False, temperature, images)
            row = logp[0, mb.response_width - len(s.response_ids) :].tolist()
            out.append([lp for lp, m in zip(row, s.loss_mask, strict=True) if m])
        self.model.train(was_training)
        return out

    # --- weights for the engine -------------------------------------------------------

    def export_weights(self, target: str | Path) -> Path:
        """Write the current policy as a HF safetensors directory the engine can load.

        LoRA adapters are merged into a copy of the base weights, so the engine needs no
        peft. The weights are written in the compute dtype (bf16 on CUDA with ``auto``, the
        float32 masters rounded once), as a model loaded in that dtype holds them, and the
        config names it. The directory is written beside ``target`` and renamed into place.
        """
        target = Path(target)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model = self.model
        if self.config.lora:
            model = copy.deepcopy(self.model).merge_and_unload()
        state = _in_dtype(model, self.dtype)
        model.save_pretrained(str(tmp), state_dict=state, safe_serialization=True)
        del state
        if self.dtype != model.dtype:  # save_pretrained names the float32 masters' dtype
            config = copy.deepcopy(model.config)
            for sub in [config, *(getattr(config, k, None) for k in config.sub_configs)]:
                if sub is not None:  # a VLM's text and vision configs name it too
                    sub.dtype = str(self.dtype).removeprefix("torch.")
            config.save_pretrained(str(tmp))
        self.tokenizer.save_pretrained(str(tmp))
        if self.vision is not None:  # a complete VLM directory: its image processor too
            self.vision.processor.save_pretrained(str(tmp))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        return target

    def reset_reference(self) -> None:
        """Make the KL's reference the policy as it is now: the loop calls this where GRPO
        starts, so β·KL holds the policy near the SFT warm-up (or the checkpoint GRPO
        resumed from), not near the base model the warm-up moved away from. Only the
        trainable tensors differ from the base; a no-op without a reference (kl_coef 0)."""
        if self.ref_model is None or self.version == 0:
            return  # no KL, or nothing trained yet: the reference already is the policy
        if self.config.lora:
            raise RuntimeError(
                "kl_coef with lora: the policy moved before GRPO (an SFT warm-up or a loaded "
                "checkpoint) and a LoRA reference cannot be moved with it; set kl_coef: 0 or "
                "lora: false"
            )
        self._copy_into_reference(self.params)

    def _copy_into_reference(self, tensors: Mapping[str, torch.Tensor]) -> None:
        ref = dict(self.ref_model.named_parameters())
        with torch.no_grad():
            for name, value in tensors.items():
                ref[name].copy_(value.to(ref[name].device, ref[name].dtype))
        self.reference_moved = True

    # --- checkpoints --------------------------------------------------------------------

    def save_checkpoint(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Trainable weights, AdamW state and counters; written to a temp dir, then renamed."""
        directory = Path(directory)
        tmp = directory.with_name(directory.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        weights = {n: p.detach().cpu().contiguous() for n, p in self.params.items()}
        save_file(weights, str(tmp / _WEIGHTS))
        optim: dict[str, torch.Tensor] = {}
        for name, p in self.params.items():
            for key, value in self.optimizer.state.get(p, {}).items():
                t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
                optim[f"{name}::{key}"] = t.detach().cpu().contiguous()
        save_file(optim, str(tmp / _OPTIM))
        if self.reference_moved:  # else the base model is the reference, nothing to keep
            ref = dict(self.ref_model.named_parameters())
            kept = {n: ref[n].detach().cpu().contiguous() for n in self.params}
            save_file(kept, str(tmp / _REFERENCE))
        state = {"step": self.step_count, "version": self.version, "extra": extra or {}}
        (tmp / _STATE).write_text(json.dumps(state))
        shutil.rmtree(directory, ignore_errors=True)
        tmp.rename(directory)
        return directory

    def load_checkpoint(self, directory: str | Path) -> dict[str, Any]:
        """Restore what :meth:`save_checkpoint` wrote; returns its ``extra`` dict."""
        directory = Path(directory)
        weights = load_file(str(directory / _WEIGHTS))
        missing = set(self.params) - set(weights)
        if missing:
            raise ValueError(f"{directory}: checkpoint lacks {len(missing)} trainable tensors")
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(weights[name].to(p.device, p.dtype))
        optim = load_file(str(directory / _OPTIM))
        for name, p in self.params.items():
            # The moments in the parameter's device and dtype (a checkpoint written by a
            # trainer that kept bf16 weights has bf16 ones). AdamW keeps its ``step``
            # counter a float32 CPU tensor unless fused/capturable (neither is used here).
            state = {
                key.split("::", 1)[1]: value if key.endswith("::step") else value.to(p)
                for key, value in optim.items()
                if key.split("::", 1)[0] == name
            }
            if state:
                self.optimizer.state[p] = state
        if self.ref_model is not None and (directory / _REFERENCE).is_file():
            self._copy_into_reference(load_file(str(directory / _REFERENCE)))
        meta = json.loads((directory / _STATE).read_text())
        self.step_count = int(meta["step"])
        self.version = int(meta["version"])
        extra: dict[str, Any] = meta.get("extra", {})
        return extra


def _in_dtype(model: Any, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """``model``'s state dict with its floating tensors in ``dtype``, but for the modules
    the model keeps in float32 whatever it is loaded in (``_keep_in_fp32_modules_strict``,
    MoE routers), as ``from_pretrained(dtype=dtype)`` would hold them."""
    keep = tuple(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    state: dict[str, torch.Tensor] = model.state_dict()
    if dtype == torch.float32:
        return state
    cast: dict[tuple[Any, ...], torch.Tensor] = {}  # tied weights stay one tensor
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if not t.is_floating_point() or any(k in name for k in keep):
            out[name] = t
            continue
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
        if key not in cast:
            cast[key] = t.to(dtype)
        out[name] = cast[key]
    return out
