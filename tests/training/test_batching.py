"""Micro-batches: left padding, the token budget and the common prefix run once."""

from __future__ import annotations

import torch

from openforge.traces.samples import Mode, Sample, SampleImage
from openforge.training.batching import MicroBatch, TrainItem, make_micro_batches

SYSTEM = list(range(100, 140))  # 40 ids every prompt starts with, as a harness's system prompt


def _item(name: str, prompt: list[int], response: list[int], advantage: float = 1.0) -> TrainItem:
    sample = Sample(
        rollout_id=name, task_id="t", group_id="g", reward=None, status="completed",
        mode=Mode.MERGED, prompt_ids=prompt, response_ids=response,
        loss_mask=[1] * len(response), logprobs=[-1.0] * len(response),
        call_ids=["c-" + name], spans=[("c-" + name, 0, len(response))], weight_versions=["0"],
    )  # fmt: skip
    return TrainItem(sample, advantage)


def _rows(mb: MicroBatch) -> list[list[int]]:
    """Each row's whole sequence (prefix + its unpadded rest), read back from the tensors."""
    out = []
    shared = mb.prefix_ids.tolist()
    width = mb.input_ids.shape[1]
    for row in range(mb.input_ids.shape[0]):
        keep = mb.attention_mask[row, len(shared) :].bool()
        assert keep.shape[0] == width
        out.append(shared + mb.input_ids[row][keep].tolist())
    return out


def test_rows_that_start_alike_share_their_prefix_once() -> None:
    items = [
        _item("a", [*SYSTEM, 1, 2], [7, 8, 9]),
        _item("b", [*SYSTEM, 1, 3, 4], [7, 2]),
        _item("c", [*SYSTEM, 5], [6, 6, 6, 6]),
    ]
    (mb,) = make_micro_batches(items, token_budget=1 << 20, pad_id=0)
    assert mb.prefix_ids.tolist() == SYSTEM  # 1 is not in every row
    assert mb.shared == 40 and mb.attention_mask.shape == (3, 40 + mb.input_ids.shape[1])
    assert sorted(_rows(mb)) == sorted(
        it.sample.prompt_ids + it.sample.response_ids for it in items
    )
    # Positions go on from the prefix, padding or not; the response ends every row.
    for row, it in enumerate(mb.items):
        n = it.length - 40
        assert mb.position_ids[row, -n:].tolist() == list(range(40, it.length))
        r = len(it.sample.response_ids)
        assert mb.targets[row, -r:].tolist() == it.sample.response_ids
        assert mb.loss_mask[row, : mb.response_width - r].sum() == 0
    assert mb.padded_tokens == 40 + 3 * mb.input_ids.shape[1]


def test_the_prefix_stops_short_of_a_row_whose_whole_prompt_is_shared() -> None:
    # That row's last prompt id must run with the rows: its logits predict its first token.
    items = [_item("a", [*SYSTEM], [1, 2]), _item("b", [*SYSTEM, 3], [4])]
    (mb,) = make_micro_batches(items, token_budget=1 << 20, pad_id=0)
    assert mb.prefix_ids.tolist() == SYSTEM[:-1]
    assert sorted(_rows(mb)) == sorted(
        it.sample.prompt_ids + it.sample.response_ids for it in items
    )


def test_the_budget_counts_the_prefix_once() -> None:
    items = [_item(f"r{i}", [*SYSTEM, i], [7, 8, 9]) for i in range(10)]  # 44 ids each
    # Without sharing 44 × 10 = 440 ids; with it 40 + 10 × 4 = 80, plus the prefix's 40
    # counted once: 10 rows fit a budget of 80, and 7 rows (68) fit 70.
    assert [len(mb.items) for mb in make_micro_batches(items, 80, 0)] == [10]
    assert [len(mb.items) for mb in make_micro_batches(items, 70, 0)] == [7, 3]
    plain = make_micro_batches(items, 80, 0, share_prefix=False)
    assert [len(mb.items) for mb in plain] == [1] * 10  # 2 × 44 > 80
    assert all(mb.shared == 0 for mb in plain)


def test_short_or_missing_common_prefixes_are_not_shared() -> None:
    short = [_item("a", [1, 2, 3, 4, 5], [6]), _item("b", [1, 2, 3, 4, 9], [6])]
    (mb,) = make_micro_batches(short, 1 << 20, 0)
    assert mb.shared == 0 and mb.attention_mask.shape == mb.input_ids.shape
    alone = make_micro_batches([_item("a", [*SYSTEM, 1], [2])], 1 << 20, 0)
    assert alone[0].shared == 0  # one row: nothing to share
    mixed = [_item("a", [*SYSTEM, 1], [2]), _item("b", [9, *SYSTEM], [2])]
    (mb,) = make_micro_batches(mixed, 1 << 20, 0)
    assert mb.shared == 0
    assert sorted(_rows(mb)) == sorted(
        it.sample.prompt_ids + it.sample.response_ids for it in mixed
    )


def test_a_sample_with_images_goes_alone_without_a_prefix() -> None:
    shown = _item("v", [*SYSTEM, 1], [2])
    shown.sample.images = [
        SampleImage("0" * 64, "image/png", offset=40, length=1, grid_thw=(1, 2, 2))
    ]
    plain = [_item("a", [*SYSTEM, 1], [2]), _item("b", [*SYSTEM, 2], [3])]
    batches = make_micro_batches([shown, *plain], 1 << 20, 0)
    alone = [mb for mb in batches if mb.items[0] is shown]
    assert len(alone) == 1 and len(alone[0].items) == 1 and alone[0].shared == 0
    rest = [mb for mb in batches if mb.items[0] is not shown]
    assert len(rest) == 1 and rest[0].shared == 40
    assert torch.equal(rest[0].prefix_ids, torch.tensor(SYSTEM))
