"""The policy loss, term by term, in the notation of the GRPO/DAPO papers.

Symbols (per token ``t`` of sample ``i``; ``m_{i,t}`` is the loss mask, 1 on sampled tokens)::

    log π_θ     the trainer's logprob of the token now (differentiable)
    log μ       the logprob the engine recorded when it sampled the token
    r_t       = exp(log π_θ − log μ)                       importance ratio
    Â_i         the rollout's advantage (see ``advantages.py``)

    L^clip_t  = −min(r_t Â, clip(r_t, 1 − ε_low, 1 + ε_high) Â)          (PPO-clip)
    w_t       = sg(min(r_t, C) / r_t)                                    (TIS)
    L_t       = w_t · L^clip_t + β · k3_t − α · H_t

The ratio is taken against the *recorded* rollout logprobs: it carries both the
engine/trainer numerical mismatch and staleness (samples drawn with older weights).
Truncated importance sampling caps the gradient's importance weight at ``C``, so a token
the engine found unlikely but the trainer finds likely cannot dominate the step — the
case PPO-clip leaves unbounded when ``Â < 0``. ``sg`` is stop-gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = [
    "Aggregation",
    "PolicyLossTerms",
    "aggregate",
    "entropy_from_logits",
    "k3_kl",
    "policy_loss",
    "ppo_clip_loss",
    "tis_weights",
    "token_logprobs",
]

Aggregation = Literal["token_mean", "seq_mean"]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[targets]`` per position, computed in float32.

    ``logits`` is ``[B, T, V]``, ``targets`` ``[B, T]``; the result is ``[B, T]``.
    """
    logits32 = logits.float()
    picked = torch.gather(logits32, -1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits32, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """``H_t = −Σ_v p_v log p_v`` per position (float32)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``L^clip_t = −min(r_t Â, clip(r_t, 1−ε_low, 1+ε_high) Â)``, ``r_t = exp(logp − old_logp)``.

    ``advantages`` broadcasts against ``logp`` (``[B, 1]`` for per-sample advantages).
    Returns the per-token loss, the ratio and a bool tensor: where the clip was active
    (the clipped term was the smaller one, so the token had no gradient).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, ratio, clipped < unclipped


def tis_weights(ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """``w_t = sg(min(r_t, C) / r_t)``.

    Scales the surrogate's gradient ``r_t Â ∇log π`` to ``min(r_t, C) Â ∇log π``.
    """
    r = ratio.detach()
    return torch.clamp(r, max=cap) / r


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(π_θ ‖ π_ref): ``e^δ − δ − 1``, ``δ = log π_ref − log π_θ``.

    Unbiased, always ≥ 0, and low-variance for nearby policies.
    """
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1.0


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token_mean",
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` per-token quantity to a scalar.

    ``token_mean``: ``Σ_{i,t} m L / Σ_{i,t} m`` — every trained token weighs the same
    (DAPO); ``seq_mean``: ``(1/N) Σ_i (Σ_t m L / Σ_t m)`` — every sample weighs the same
    (original GRPO). Under gradient accumulation pass the whole step's ``num_tokens`` or
    ``num_seqs`` so each micro-batch is normalised by the step's total, not its own.
    """
    mask = mask.to(per_token.dtype)
    if mode == "token_mean":
        denom = num_tokens if num_tokens is not None else float(mask.sum().item())
        return (per_token * mask).sum() / max(denom, 1.0)
    per_seq = (per_token * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
    denom = num_seqs if num_seqs is not None else float(per_token.shape[0])
    return per_seq.sum() / max(denom, 1.0)


@dataclass(slots=True)
class PolicyLossTerms:
    """The scalar loss and the per-step diagnostics the loop logs (all detached except ``loss``)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    clip_fraction: torch.Tensor  # share of trained tokens whose clip was active
    tis_fraction: torch.Tensor  # share of trained tokens whose weight was truncated
    kl: torch.Tensor  # mean k3 over trained tokens (0 without a reference)
    entropy: torch.Tensor  # mean entropy over trained tokens (0 when not computed)
    ratio_mean: torch.Tensor


def policy_loss(
    logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    tis_cap: float | None = 2.0,
    aggregation: Aggregation = "token_mean",
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
) -> PolicyLossTerms:
    """``L = agg(w_t · L^clip_t + β k3_t − α H_t)`` over the tokens where ``mask`` is 1."""
    clip_loss, ratio, clipped = ppo_clip_loss(logp, rollout_logp, advantages, eps_low, eps_high)
    per_token = clip_loss
    m = mask.to(logp.dtype)
    n_tok = m.sum().clamp(min=1.0)
    if tis_cap is not None:
        per_token = tis_weights(ratio, tis_cap) * per_token
        tis_fraction = ((ratio.detach() > tis_cap).to(m.dtype) * m).sum() / n_tok
    else:
        tis_fraction = torch.zeros(())
    kl = torch.zeros(())
    if ref_logp is not None:
        k3 = k3_kl(logp, ref_logp)
        kl = (k3.detach() * m).sum() / n_tok
        if kl_coef:
            per_token = per_token + kl_coef * k3
    ent = torch.zeros(())
    if entropy is not None:
        ent = (entropy.detach() * m).sum() / n_tok
        if entropy_coef:
            per_token = per_token - entropy_coef * entropy
    loss = aggregate(per_token, mask, aggregation, num_tokens, num_seqs)
    return PolicyLossTerms(
        loss=loss,
        pg_loss=aggregate(clip_loss.detach(), mask, aggregation, num_tokens, num_seqs),
        clip_fraction=(clipped.to(m.dtype) * m).sum() / n_tok,
        tis_fraction=tis_fraction,
        kl=kl,
        entropy=ent,
        ratio_mean=(ratio.detach() * m).sum() / n_tok,
    )
