"""Samples → padded tensors, split into micro-batches by a token budget.

Rows are *left*-padded so every row's response ends at the last position: the model then
only has to project the last ``R_max + 1`` hidden states to the vocabulary
(``logits_to_keep``), not the (usually much longer) prompts. Position ids are given
explicitly so padding does not shift them. A sample that shows images goes in a batch of
its own: a VLM derives its 3-D (M-RoPE) positions from the row's image grids itself.

Rows that begin with the same ids share them: a harness sends the same system prompt and
tools at the start of every rollout (464 of claw's ~485 prompt tokens), so a batch's common
prefix is run once, as one row, and each row only from where the rows differ, attending to
the prefix's keys and values. The budget counts the prefix once.
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


_MIN_SHARED = 16  # a shorter common prefix is not worth a forward pass of its own


@dataclass(slots=True)
class MicroBatch:
    """``prefix_ids`` is ``[P]``, the ids every row starts with (``P`` may be 0);
    ``input_ids``/``position_ids`` are ``[B, T]``, each row's ids after the prefix;
    ``attention_mask`` is ``[B, P + T]``; the rest ``[B, R]``.

    Column ``j`` of the ``[B, R]`` tensors is the token at input position ``T − R + j``.
    """

    prefix_ids: torch.Tensor
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
    def shared(self) -> int:
        """How many leading ids every row shares (run once)."""
        return int(self.prefix_ids.numel())

    @property
    def padded_tokens(self) -> int:
        """The positions one forward pass runs: the prefix once, then every row's rest."""
        return self.shared + int(self.input_ids.numel())


def _shared_length(a: list[int], b: list[int], limit: int) -> int:
    """How many leading ids ``a`` and ``b`` have in common, at most ``limit``."""
    limit = min(limit, len(a), len(b))
    if a[:limit] == b[:limit]:  # the usual case, compared in C
        return limit
    n = 0
    while a[n] == b[n]:
        n += 1
    return n


def _collate(items: list[TrainItem], pad_id: int, shared: int) -> MicroBatch:
    width = max(it.length for it in items) - shared
    resp = max(len(it.sample.response_ids) for it in items)
    b = len(items)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, resp), dtype=torch.float32)
    old = torch.zeros((b, resp), dtype=torch.float32)
    for row, it in enumerate(items):
        s = it.sample
        seq = (s.prompt_ids + s.response_ids)[shared:]
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        attn[row, width - len(seq) :] = 1
        r = len(s.response_ids)
        if r:
            mask[row, resp - r :] = torch.tensor(s.loss_mask, dtype=torch.float32)
            old[row, resp - r :] = torch.tensor(s.logprobs, dtype=torch.float32)
    positions = shared + (attn.cumsum(-1) - 1).clamp(min=0)
    return MicroBatch(
        prefix_ids=torch.tensor(items[0].sample.prompt_ids[:shared], dtype=torch.long),
        input_ids=ids,
        attention_mask=torch.cat([attn.new_ones((b, shared)), attn], dim=1),
        position_ids=positions,
        targets=ids[:, width - resp :],
        loss_mask=mask,
        rollout_logprobs=old,
        advantages=torch.tensor([[it.advantage] for it in items], dtype=torch.float32),
        items=items,
    )


def make_micro_batches(
    items: Sequence[TrainItem], token_budget: int, pad_id: int, share_prefix: bool = True
) -> list[MicroBatch]:
    """Group items (sorted by length, so padding is small) into batches of ≤ ``token_budget``
    positions (a common prefix counted once); an item longer than the budget, or with
    images, goes alone.

    With ``share_prefix``, a batch's rows run their common prefix once (at least
    ``_MIN_SHARED`` ids, and short of every row's last prompt id, whose logits predict the
    first response token). Off where the model cannot take a cache: gradient
    checkpointing drops it, and a VLM derives positions itself."""
    ordered = sorted(items, key=lambda it: it.length)
    batches: list[tuple[list[TrainItem], int]] = [([it], 0) for it in ordered if it.sample.images]
    ordered = [it for it in ordered if not it.sample.images]
    current: list[TrainItem] = []
    reach = 0  # ids every row of ``current`` starts with (capped as above)

    def kept(reach: int, rows: int) -> int:
        return reach if share_prefix and rows > 1 and reach >= _MIN_SHARED else 0

    for it in ordered:
        prompt = it.sample.prompt_ids
        if current:
            first = current[0].sample.prompt_ids
            common = min(_shared_length(first, prompt, reach), len(prompt) - 1)
            shared = kept(common, len(current) + 1)
            # Sorted ascending, so the newest item is the widest row of the batch.
            if shared + (it.length - shared) * (len(current) + 1) <= token_budget:
                current.append(it)
                reach = common
                continue
            batches.append((current, kept(reach, len(current))))
        current, reach = [it], len(prompt) - 1
    if current:
        batches.append((current, kept(reach, len(current))))
    return [_collate(group, pad_id, shared) for group, shared in batches]


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
