"""Choosing the next token from a batch of logits, and the logprob RL training needs.

The logprob reported for a sampled token is that of the distribution it was actually drawn
from: logits divided by the temperature, then restricted by top-k, then by top-p, then
renormalised (a log-softmax over what is left). Importance ratios between the sampler and
the trainer need exactly that distribution.

Greedy decoding (temperature 0) draws from a point mass, whose logprob (0) says nothing; it
reports the log-softmax of the raw logits instead (temperature 1, no filters), which is
what a trainer re-scoring the same ids computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["RowSampling", "filtered_logprobs", "sample_rows"]


@dataclass(slots=True)
class RowSampling:
    """One sequence's sampling settings and its own random stream."""

    temperature: float
    top_p: float
    top_k: int
    generator: torch.Generator | None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def filtered_logprobs(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """Log-probabilities (last dim) after temperature, top-k and top-p, renormalised.

    Tokens filtered out get ``-inf``. Works on any leading shape.
    """
    scaled = logits.float() / temperature
    vocab = scaled.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass
        # before it already does. The first token is always kept.
        drop_sorted = (torch.cumsum(probs, dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return torch.log_softmax(scaled, dim=-1)


def sample_rows(logits: torch.Tensor, rows: list[RowSampling]) -> tuple[list[int], list[float]]:
    """Pick one token per row of ``logits`` (shape ``[B, V]``); return ids and their logprobs."""
    raw = torch.log_softmax(logits.float(), dim=-1)
    ids: list[int] = [0] * len(rows)
    logprobs: list[float] = [0.0] * len(rows)
    greedy = [i for i, r in enumerate(rows) if r.greedy]
    if greedy:
        index = torch.tensor(greedy, device=logits.device)
        picked = torch.argmax(logits[index], dim=-1)
        values = raw[index].gather(-1, picked[:, None])[:, 0]
        for j, i in enumerate(greedy):
            ids[i] = int(picked[j])
            logprobs[i] = float(values[j])
    for i, row in enumerate(rows):
        if row.greedy:
            continue
        if row.top_k == 0 and row.top_p >= 1.0 and row.temperature == 1.0:
            logp = raw[i]
        else:
            logp = filtered_logprobs(logits[i], row.temperature, row.top_k, row.top_p)
        token = int(torch.multinomial(logp.exp(), 1, generator=row.generator))
        ids[i] = token
        logprobs[i] = float(logp[token])
    return ids, logprobs
