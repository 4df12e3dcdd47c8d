"""Samples → padded tensors, split into micro-batches by a token budget.

Rows are *left*-padded so every row's response ends at the last position: the model then
only has to project the last ``R_max + 1`` hidden states to the vocabulary
(``logits_to_keep``), not the (usually much longer) prompts. Position ids are given
explicitly so padding does not shift them. A sample that shows images goes in a batch of
its own: a VLM derives its 3-D (M-RoPE) positions from the row's image grids itself.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from openforge.traces.samples import SampleImage

__all__ = ["MicroBatch", "TrainItem", "TrainableSample", "make_micro_batches", "split_updates"]


class TrainableSample(Protocol):
    """What the trainer reads from a sample (``traces.samples.Sample`` has it)."""

    rollout_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    images: list[SampleImage]  # the images it shows a VLM (none for text)


@dataclass(slots=True)
class TrainItem:
    """One sample with its advantage."""

    sample: TrainableSample
    advantage: float

    @property
    def length(self) -> int:
        return len(self.sample.prompt_ids) + len(self.sample.response_ids)


@dataclass(slots=True)
class MicroBatch:
    """``input_ids``/``attention_mask``/``position_ids`` are ``[B, T]``; the rest ``[B, R]``.

    Column ``j`` of the ``[B, R]`` tensors is the token at input position ``T − R + j``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    advantages: torch.Tensor  # [B, 1]
    items: list[TrainItem]

    @property
    def response_width(self) -> int:
        return int(self.targets.shape[1])

    @property
    def padded_tokens(self) -> int:
        return int(self.input_ids.numel())


def _collate(items: list[TrainItem], pad_id: int) -> MicroBatch:
    width = max(it.length for it in items)
    resp = max(len(it.sample.response_ids) for it in items)
    b = len(items)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, resp), dtype=torch.float32)
    old = torch.zeros((b, resp), dtype=torch.float32)
    for row, it in enumerate(items):
        s = it.sample
        seq = s.prompt_ids + s.response_ids
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        attn[row, width - len(seq) :] = 1
        r = len(s.response_ids)
        if r:
            mask[row, resp - r :] = torch.tensor(s.loss_mask, dtype=torch.float32)
            old[row, resp - r :] = torch.tensor(s.logprobs, dtype=torch.float32)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(
        input_ids=ids,
        attention_mask=attn,
        position_ids=positions,
        targets=ids[:, width - resp :],
        loss_mask=mask,
        rollout_logprobs=old,
        advantages=torch.tensor([[it.advantage] for it in items], dtype=torch.float32),
        items=items,
    )


def make_micro_batches(
    items: Sequence[TrainItem], token_budget: int, pad_id: int
) -> list[MicroBatch]:
    """Group items (sorted by length, so padding is small) into batches of ≤ ``token_budget``
    padded tokens; an item longer than the budget, or with images, goes alone."""
    ordered = sorted(items, key=lambda it: it.length)
    batches: list[list[TrainItem]] = [[it] for it in ordered if it.sample.images]
    ordered = [it for it in ordered if not it.sample.images]
    current: list[TrainItem] = []
    for it in ordered:
        # Sorted ascending, so the newest item is the widest row of the batch.
        if current and it.length * (len(current) + 1) > token_budget:
            batches.append(current)
            current = []
        current.append(it)
    if current:
        batches.append(current)
    return [_collate(group, pad_id) for group in batches]


def split_updates(items: Sequence[TrainItem], updates: int, key: str) -> list[list[TrainItem]]:
    """A step's items shuffled (seeded by ``key``) and dealt into ``updates`` near-equal
    shares, one per optimizer update; fewer when there are fewer items. Shuffled so no
    update sees only one group (samples come group by group)."""
    m = max(1, min(updates, len(items)))
    if m == 1:
        return [list(items)]
    order = list(items)
    random.Random(key).shuffle(order)
    return [order[i::m] for i in range(m)]
