"""Advantages and loss terms against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from openforge.training.advantages import group_advantages, grpo_advantages
from openforge.training.losses import (
    aggregate,
    entropy_from_logits,
    k3_kl,
    policy_loss,
    ppo_clip_loss,
    tis_weights,
    token_logprobs,
)


def test_group_advantages_mean_baseline() -> None:
    # mean = 0.25 → (0.75, −0.25, −0.25, −0.25)
    assert group_advantages([1.0, 0.0, 0.0, 0.0], scale="none") == pytest.approx(
        [0.75, -0.25, -0.25, -0.25]
    )


def test_group_advantages_std_normalised() -> None:
    # population std of (1, 0, 0, 0) = sqrt(3/16) = 0.4330…
    std = math.sqrt(3 / 16)
    got = group_advantages([1.0, 0.0, 0.0, 0.0], scale="std", eps=0.0)
    assert got == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])


def test_grpo_drops_and_counts_zero_variance_and_singleton_groups() -> None:
    scored = [
        ("g1", "a", 1.0), ("g1", "b", 0.0),
        ("g2", "c", 0.5), ("g2", "d", 0.5),
        ("g3", "e", 1.0),
    ]  # fmt: skip
    out = grpo_advantages(scored, scale="none")
    assert out.advantages == pytest.approx({"a": 0.5, "b": -0.5})
    assert (out.kept_groups, out.zero_variance_groups, out.singleton_groups) == (1, 1, 1)


def test_solved_groups_get_the_self_imitation_advantage_on_their_first_rollouts() -> None:
    scored = [
        ("g1", "a", 1.0), ("g1", "b", 0.0),
        ("solved", "c", 1.0), ("solved", "d", 1.0), ("solved", "e", 1.0),
        ("partial", "f", 0.5), ("partial", "g", 0.5),
        ("failed", "h", 0.0), ("failed", "i", 0.0),
    ]  # fmt: skip
    out = grpo_advantages(scored, scale="none", solved_advantage=0.1, uniform_rollouts=2)
    assert out.advantages == pytest.approx({"a": 0.5, "b": -0.5, "c": 0.1, "d": 0.1})
    counts = (out.kept_groups, out.solved_groups, out.zero_variance_groups)
    assert counts == (1, 1, 2)  # uniform at 0.5 or 0 is no success to imitate
    # off by default: the solved group is dropped like any uniform one
    assert grpo_advantages(scored, scale="none").zero_variance_groups == 3
    # with a KL term every other uniform group keeps 2 rollouts at advantage 0, for the KL
    kl = grpo_advantages(
        scored, scale="none", solved_advantage=0.1, uniform_rollouts=2, kl_anchor=True
    )
    assert kl.advantages == pytest.approx(
        {"a": 0.5, "b": -0.5, "c": 0.1, "d": 0.1, "f": 0.0, "g": 0.0, "h": 0.0, "i": 0.0}
    )
    assert (kl.solved_groups, kl.zero_variance_groups, kl.kl_only_groups) == (1, 2, 2)


def test_token_logprobs_and_entropy() -> None:
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # p = (0.25, 0.75)
    lp = token_logprobs(logits, torch.tensor([[1]]))
    assert lp.item() == pytest.approx(math.log(0.75))
    h = entropy_from_logits(logits).item()
    assert h == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_ppo_clip_by_hand() -> None:
    # ratios 1.5, 0.5, 1.1 with ε = 0.2
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    old = torch.zeros(1, 3)
    loss, ratio, clipped = ppo_clip_loss(logp, old, torch.tensor([[1.0]]), 0.2, 0.2)
    # Â=+1: −min(1.5, 1.2) = −1.2 (clipped); −min(0.5, 0.8) = −0.5; −min(1.1, 1.1) = −1.1
    assert loss.tolist()[0] == pytest.approx([-1.2, -0.5, -1.1])
    assert clipped.tolist()[0] == [True, False, False]
    loss, _, clipped = ppo_clip_loss(logp, old, torch.tensor([[-1.0]]), 0.2, 0.2)
    # Â=−1: −min(−1.5, −1.2) = 1.5; −min(−0.5, −0.8) = 0.8 (clipped); −min(−1.1, −1.1) = 1.1
    assert loss.tolist()[0] == pytest.approx([1.5, 0.8, 1.1])
    assert clipped.tolist()[0] == [False, True, False]
    assert ratio.tolist()[0] == pytest.approx([1.5, 0.5, 1.1])


def test_tis_caps_the_gradient_weight() -> None:
    # r = 4 with Â = −1 is unclipped by PPO; its gradient r·Â = −4 is capped to C·Â = −2.
    logp = torch.tensor([[math.log(4.0)]], requires_grad=True)
    loss, ratio, _ = ppo_clip_loss(logp, torch.zeros(1, 1), torch.tensor([[-1.0]]))
    (tis_weights(ratio, 2.0) * loss).sum().backward()  # type: ignore[no-untyped-call]
    assert logp.grad is not None
    # loss = −(r·Â) = r, so d loss/d log π = r = 4; TIS scales it by w = 2/4
    assert logp.grad.item() == pytest.approx(2.0)
    assert tis_weights(torch.tensor([0.5, 3.0]), 2.0).tolist() == pytest.approx([1.0, 2 / 3])


def test_k3_by_hand() -> None:
    # log π = log 0.5, log π_ref = log 0.25 → δ = log 0.5; e^δ − δ − 1 = 0.5 + log 2 − 1
    got = k3_kl(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])).item()
    assert got == pytest.approx(0.5 + math.log(2) - 1)
    assert k3_kl(torch.tensor([0.3]), torch.tensor([0.3])).item() == 0.0


def test_aggregation_token_vs_sequence_mean() -> None:
    per = torch.tensor([[1.0, 3.0, 0.0], [5.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(per, mask, "token_mean").item() == pytest.approx((1 + 3 + 5) / 3)
    assert aggregate(per, mask, "seq_mean").item() == pytest.approx((2 + 5) / 2)
    # accumulation: normalised by the whole step's token count
    assert aggregate(per, mask, "token_mean", num_tokens=9).item() == pytest.approx(1.0)


def test_policy_loss_combines_terms() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    rollout = torch.log(torch.tensor([[0.5, 0.25]]))  # ratios 1, 2
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    ent = torch.tensor([[1.0, 2.0]])
    terms = policy_loss(
        logp, rollout, torch.tensor([[1.0]]), torch.tensor([[1, 1]]),
        eps_low=0.2, eps_high=0.2, tis_cap=1.5, ref_logp=ref, kl_coef=0.1,
        entropy=ent, entropy_coef=0.01,
    )  # fmt: skip
    # clip: (−1, −1.2); TIS weights (1, 1.5/2); k3: (0.5+ln2−1, 0); entropy (1, 2)
    k3_0 = 0.5 + math.log(2) - 1
    tok = [-1.0 + 0.1 * k3_0 - 0.01, -1.2 * 0.75 - 0.02]
    assert terms.loss.item() == pytest.approx(sum(tok) / 2)
    assert terms.clip_fraction.item() == pytest.approx(0.5)
    assert terms.tis_fraction.item() == pytest.approx(0.5)
    assert terms.kl.item() == pytest.approx(k3_0 / 2)
    assert terms.entropy.item() == pytest.approx(1.5)
