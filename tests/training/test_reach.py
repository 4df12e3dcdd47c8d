"""The within-reach statistics on known inputs: t quantiles against their closed forms and
published table values, intervals computed by hand with numpy, the task choice and the
paired gain on hand-made evaluations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from openforge.training.reach import (
    ci95,
    eval_rewards,
    fixed_tasks_se,
    pooled_gain,
    reach_gain,
    reach_report,
    skill_changes,
    t_quantile,
    within_reach,
)


def test_t_quantile_matches_closed_forms_and_the_table() -> None:
    # df = 1 (Cauchy): tan(pi (p - 1/2)); df = 2: (2p - 1) / sqrt(2 p (1 - p))
    assert t_quantile(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-9)
    assert t_quantile(0.975, 2) == pytest.approx(0.95 / math.sqrt(2 * 0.975 * 0.025), rel=1e-9)
    assert t_quantile(0.9, 2) == pytest.approx(0.8 / math.sqrt(2 * 0.9 * 0.1), rel=1e-9)
    # two-sided 95% values of a printed t table (4 decimals)
    table = {3: 3.1824, 4: 2.7764, 5: 2.5706, 7: 2.3646, 10: 2.2281, 30: 2.0423, 100: 1.9840}
    for df, want in table.items():
        assert t_quantile(0.975, df) == pytest.approx(want, abs=5e-5), df
    assert t_quantile(0.025, 5) == pytest.approx(-2.5706, abs=5e-5)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_ci95_is_the_t_interval() -> None:
    values = [0.1, 0.4, 0.35, 0.8, 0.2]
    arr = np.array(values)
    got = ci95(values)
    want_half = 2.7764451 * arr.std(ddof=1) / math.sqrt(len(arr))
    assert got.mean == pytest.approx(arr.mean())
    assert got.half == pytest.approx(want_half, rel=1e-6)
    assert got.n == 5
    one = ci95([0.3])
    assert one.mean == 0.3 and math.isnan(one.half) and not one.excludes_zero
    assert ci95([1.0, 1.2, 0.9]).excludes_zero
    assert not ci95([1.0, -1.2, 0.9]).excludes_zero


def test_within_reach_chooses_on_even_samples_and_measures_on_odd() -> None:
    sft = {
        "never": [0.0, 0.0, 0.0, 0.0],
        "always": [1.0, 1.0, 1.0, 1.0],
        # chosen by its even samples (1, 0); its baseline is the odd ones (0, 0)
        "half": [1.0, 0.0, 0.0, 0.0],
        # odd samples pass, even ones do not: not chosen (the choice never sees them)
        "lucky": [0.0, 1.0, 0.0, 1.0],
        "mixed": [0.0, 1.0, 1.0, 1.0],
        "single": [1.0],
    }
    reach = within_reach(sft)
    assert reach.tasks == ("half", "mixed")
    assert reach.baseline == {"half": [0.0, 0.0], "mixed": [1.0, 1.0]}
    assert reach.selection_samples == 2 and reach.tasks_seen == 6
    # a reward below the pass threshold is a failure
    assert within_reach({"t": [0.5, 0.0, 1.0, 0.0]}).tasks == ("t",)
    assert within_reach({"t": [0.5, 0.0, 0.5, 0.0]}).tasks == ()


def test_reach_gain_pairs_tasks_and_compares_pass_at_1_with_pass_at_k() -> None:
    sft = {"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0, 0.0, 1.0, 0.0], "c": [0.0, 0.0, 0.0, 0.0]}
    reach = within_reach(sft)
    assert reach.tasks == ("a", "b")  # baselines a: [0, 1], b: [0, 0]
    after = {"a": [1.0, 1.0, 1.0, 0.0], "b": [1.0, 0.0, 0.0, 0.0], "c": [1.0, 1.0, 1.0, 1.0]}
    g = reach_gain(reach, after)
    assert g is not None
    diffs = [0.75 - 0.5, 0.25 - 0.0]  # c is not within reach: its gain does not count
    assert g.gain.mean == pytest.approx(np.mean(diffs))
    assert g.gain.half == pytest.approx(12.7062047 * np.std(diffs, ddof=1) / math.sqrt(2))
    assert (g.sft, g.after) == (pytest.approx(0.25), pytest.approx(0.5))
    assert g.k == 2
    # pass@2 of the baseline: a 1 - C(1,2)/C(2,2) = 1, b 0; pass@1: a 0.5, b 0
    assert (g.passk_sft, g.pass1_sft, g.pass1_after) == (0.5, 0.25, 0.5)
    # the baseline's noise: a's two samples have variance 0.5, b's 0
    assert g.baseline_se == pytest.approx(math.sqrt(0.5 / 2) / 2)
    assert reach_gain(within_reach({"c": [0.0, 0.0]}), after) is None


def test_pooled_gain_adds_a_shared_baselines_noise() -> None:
    gains = [0.12, 0.08, 0.10]
    plain = pooled_gain(gains)
    want = 4.3026527 * np.std(gains, ddof=1) / math.sqrt(3)
    assert plain.mean == pytest.approx(0.10) and plain.half == pytest.approx(want, rel=1e-6)
    shared = pooled_gain(gains, shared_baseline_se=0.01)
    assert shared.half == pytest.approx(math.sqrt(want**2 + (1.959964 * 0.01) ** 2))


def test_fixed_tasks_se_and_eval_rewards_read_in_sample_order(tmp_path: Path) -> None:
    assert fixed_tasks_se({"a": [0.0, 1.0], "b": [1.0]}) == pytest.approx(math.sqrt(0.25) / 2)
    rows = [
        {"task_id": "a", "sample": 1, "status": "completed", "reward": 0.0},
        {"task_id": "a", "sample": 0, "status": "completed", "reward": 1.0},
        {"task_id": "b", "sample": 0, "status": "infra_error", "reward": None},
        {"task_id": "b", "sample": 1, "status": "completed", "reward": 1.0},
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert eval_rewards(tmp_path) == {"a": [1.0, 0.0], "b": [1.0]}


def test_reach_report_prints_each_seed_and_the_pooled_gain() -> None:
    sft = {"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0, 0.0, 1.0, 0.0], "c": [0.0, 0.0, 0.0, 0.0]}
    after = [{"a": [1.0, 1.0], "b": [1.0, 0.0]}, {"a": [1.0, 0.0], "b": [0.0, 0.0]}]
    lines = reach_report([sft, sft], after, shared_sft=True)
    assert lines[0].startswith("seed 0: within reach 2 of 3 held-out tasks: SFT 25.0 -> GRPO 75.0")
    assert "pass@1 after 75.0 vs SFT pass@1 25.0, pass@2 50.0" in lines[0]
    # seed gains 0.5 and 0.0; the shared baseline's noise widens the interval over seeds
    half = math.hypot(12.7062047 * np.std([0.5, 0.0], ddof=1) / math.sqrt(2),
                      1.959964 * math.sqrt(0.5 / 2) / 2)  # fmt: skip
    assert lines[2] == (
        f"within reach, GRPO only, pooled over 2 seed(s): +25.0 ± {100 * half:.1f} points "
        "(does not exclude 0)"
    )
    single = reach_report([{"a": [1.0]}], [{"a": [1.0]}])
    assert single == [
        "seed 0: no held-out task within reach (of 1, chosen on 1 SFT sample(s) each; "
        "3+ SFT samples per task are needed: 2 to choose, the rest to measure)"
    ]


def test_skill_changes_flag_a_loss_beyond_the_noise_with_agresti_caffo() -> None:
    skill_of = {"mk-0": "make-dir", "mk-1": "make-dir", "cp-0": "copy", "ls-0": "list"}
    # one shared SFT evaluation: make-dir passed all 32 samples; copy 1 of 4; list 4 of 4
    sft = [{"mk-0": [1.0] * 16, "mk-1": [1.0] * 16, "cp-0": [1.0, 0, 0, 0], "ls-0": [1.0] * 4}]
    # three seeds after GRPO: make-dir 17 of 24 (run B of docs/training.md), copy 12 of
    # 12, list 11 of 12
    after = [
        {"mk-0": [1.0] * 4, "mk-1": [1.0, 1, 0, 0], "cp-0": [1.0] * 4, "ls-0": [1.0] * 4},
        {"mk-0": [1.0] * 4, "mk-1": [1.0, 1, 0, 0], "cp-0": [1.0] * 4, "ls-0": [1.0, 1, 1, 0]},
        {"mk-0": [1.0] * 4, "mk-1": [1.0, 0, 0, 0], "cp-0": [1.0] * 4, "ls-0": [1.0] * 4},
    ]
    got = {c.skill: c for c in skill_changes(sft, after, skill_of)}
    mk = got["make-dir"]
    assert (mk.sft, mk.after, mk.sft_samples, mk.after_samples) == (1.0, 17 / 24, 32, 24)
    # Agresti–Caffo: 33/34 against 18/26
    p1, p2 = 33 / 34, 18 / 26
    half = 1.959964 * math.sqrt(p1 * (1 - p1) / 34 + p2 * (1 - p2) / 26)
    assert mk.change.mean == pytest.approx(p2 - p1)
    assert mk.change.half == pytest.approx(half)
    assert mk.loses  # -27.8 ± 18.6 points
    assert not got["copy"].loses and got["copy"].change.mean > 0
    # 11 of 12 after 4 of 4: a loss the 4 SFT samples cannot tell from noise
    assert got["list"].after < got["list"].sft and not got["list"].loses
