"""What a run cost: token counts by role from the admin API's call list, sums over results,
and prices."""

from __future__ import annotations

import pytest

from openforge.rollouts.config import RolloutResult
from openforge.rollouts.cost import Prices, RunCost, TokenCount, cost_html, usage_from_calls


def test_usage_counts_tokens_by_recorded_role_else_by_engine() -> None:
    calls = [
        {"prompt_tokens": 100, "output_tokens": 10, "engine": "local"},
        {"prompt_tokens": 120, "output_tokens": 5, "engine": "local"},
        {"prompt_tokens": 50, "output_tokens": 7, "engine": "upstream"},
        {"prompt_tokens": 30, "output_tokens": 3, "engine": "upstream", "role": "judge"},
        {"prompt_tokens": 9, "output_tokens": 1, "engine": "local", "role": "user"},
    ]
    assert usage_from_calls(calls) == {
        "policy": {"calls": 2, "prompt": 220, "output": 15},
        "teacher": {"calls": 1, "prompt": 50, "output": 7},
        "judge": {"calls": 1, "prompt": 30, "output": 3},
        "user": {"calls": 1, "prompt": 9, "output": 1},
    }
    assert usage_from_calls([]) == {}


def _result(total: float, usage: dict[str, dict[str, int]]) -> RolloutResult:
    return RolloutResult(task_id="t", sample=0, status="completed", timings={"total": total},
                         usage=usage)  # fmt: skip


def test_run_cost_sums_results_and_prices_them() -> None:
    cost = RunCost(wall_s=60.0)
    cost.add_results([
        _result(10.0, {"policy": {"calls": 2, "prompt": 1_000_000, "output": 500_000}}),
        _result(26.0, {"policy": {"calls": 1, "prompt": 1_000_000, "output": 0},
                       "judge": {"calls": 1, "prompt": 10, "output": 2}}),
    ])  # fmt: skip
    cost.add_results([_result(4.0, {"policy": {"calls": 1, "prompt": 5, "output": 6}})], "teacher")
    cost.trainer_tokens = 2_000_000
    cost.add_phase("eval", 3.0)
    cost.add_phase("eval", 2.0)
    assert cost.rollouts == 3 and cost.sandbox_s == 40.0
    assert cost.tokens["policy"] == TokenCount(3, 2_000_000, 500_000)
    assert cost.tokens["teacher"] == TokenCount(1, 5, 6)
    assert cost.phases_s == {"eval": 5.0}
    prices = Prices(input_per_mtok=1.0, output_per_mtok=4.0, sandbox_per_hour=3.6,
                    train_per_mtok=0.5)  # fmt: skip
    money = cost.money(prices)
    assert money["engine_input"] == pytest.approx(2_000_015 / 1e6)
    assert money["engine_output"] == pytest.approx(500_008 / 1e6 * 4)
    assert money["sandboxes"] == pytest.approx(0.04)
    assert money["trainer"] == pytest.approx(1.0)
    assert money["total"] == pytest.approx(sum(v for k, v in money.items() if k != "total"))
    out = cost.as_dict(prices)
    assert out["engine_tokens"]["judge"] == {"calls": 1, "prompt": 10, "output": 2}
    assert out["prices"]["sandbox_per_hour"] == 3.6 and "total" in out["money"]
    # no prices: nothing is charged and no money is shown
    assert cost.money(Prices()) == {} and "money" not in cost.as_dict(Prices())
    # only one price given: only that item
    assert set(cost.money(Prices(sandbox_per_hour=1.0))) == {"sandboxes", "total"}
    page = cost_html(cost, prices)
    assert "<td style=text-align:left>judge</td><td>1</td><td>10</td><td>2</td>" in page
    assert "Price" in page and "wall: eval" in page
    assert "Price" not in cost_html(cost)
