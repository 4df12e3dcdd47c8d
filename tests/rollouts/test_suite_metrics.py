"""The suites' own metrics: ClawEval's pass^k / pass@k (a trial passes at 0.75) per
category and split, QwenClawBench's mean score per domain, and both in ``openforge eval``'s
summary.json for runs over the suites' checkouts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from openforge.rollouts.config import RolloutResult
from openforge.suites.metrics import suite_metrics
from openforge.tasks.model import Task

from .test_cli import _run

pytestmark = pytest.mark.slow


def _task(tid: str, fmt: str, category: str, split: str = "general") -> Task:
    return Task(id=tid, instruction="x", path=Path(tid), format=fmt, category=category, split=split)


def _results(scores: dict[str, list[float | None]]) -> list[RolloutResult]:
    return [
        RolloutResult(
            task_id=t,
            sample=i,
            status="infra_error" if s is None else "completed",
            reward=s,
        )
        for t, ss in scores.items()
        for i, s in enumerate(ss)
    ]


def test_claweval_pass_hat_and_at_k_by_category_and_split() -> None:
    tasks = [
        _task("a", "claweval", "finance"),
        _task("b", "claweval", "finance"),
        _task("c", "claweval", "ops", split="multimodal"),
        _task("d", "claweval", "ops"),
    ]
    results = _results(
        {
            "a": [0.8, 0.75, 0.9],  # every trial passes: pass^3 and pass@3
            "b": [0.8, 0.7, 0.2],  # one passes: pass@3 only
            "c": [0.1, 0.2, 0.3],  # none
            "d": [1.0, None, 1.0],  # an infra error: incomplete, not a failure
        }
    )
    (m,) = suite_metrics(tasks, results, trials=3)
    assert m.suite == "claweval" and m.incomplete == ["d"]
    assert m.overall["tasks"] == 3
    assert m.overall["pass^3"] == pytest.approx(1 / 3)
    assert m.overall["pass@3"] == pytest.approx(2 / 3)
    assert m.by_category["finance"]["pass^3"] == 0.5 and m.by_category["ops"]["pass@3"] == 0.0
    assert m.by_split["multimodal"]["tasks"] == 1


def test_qwenclawbench_mean_score_per_domain_and_pass_k_at_full_score() -> None:
    tasks = [_task("a", "qwenclawbench", "Files"), _task("b", "qwenclawbench", "Ops")]
    (m,) = suite_metrics(tasks, _results({"a": [1.0, 0.5], "b": [0.2, None]}), trials=2)
    assert m.overall["mean_score"] == pytest.approx((0.75 + 0.2) / 2)
    assert m.by_category == {
        "Files": {
            "tasks": 1,
            "mean_score": 0.75,
            "pass@1": 0.5,
            "pass^1": 0.5,
            "pass@2": 1.0,
            "pass^2": 0.0,
        },
        "Ops": {
            "tasks": 1,
            "mean_score": 0.2,
            "pass@1": 0.0,
            "pass^1": 0.0,
            "pass@2": 0.0,
            "pass^2": 0.0,
        },
    }
    assert m.incomplete == ["b"]


def test_other_tasks_have_no_suite_metrics() -> None:
    assert suite_metrics([_task("a", "native", "")], _results({"a": [1.0]}), 1) == []


@pytest.mark.parametrize("suite", ["claweval", "qwenclawbench"])
async def test_eval_writes_the_suite_metrics(
    suite: str, gateway: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.claweval_sample import write_sample as claweval_sample
    from tasks.qcb_sample import write_sample as qcb_sample

    monkeypatch.delenv("OPENFORGE_JUDGE_BASE_URL", raising=False)
    root = (claweval_sample if suite == "claweval" else qcb_sample)(tmp_path / suite)
    rc, out = await _run(
        "eval",
        "--tasks",
        f"{suite}:{root}",
        "--harness",
        "claw",
        "--n",
        "3",
        "--gateway",
        gateway,
        "--out",
        str(tmp_path / "run"),
        env={"TMPDIR": str(tmp_path)},
    )
    assert rc == 0, out
    (m,) = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())["suites"]
    assert m["suite"] == suite and m["trials"] == 3
    # The scripted engine answers "hello": a no-op run. Tasks needing a judge, a failing
    # service or a simulated user are infra_error and listed as incomplete.
    if suite == "claweval":
        assert m["overall"] == {
            "tasks": 1,
            "pass^3": 0.0,
            "pass@3": 0.0,
            "avg_score": pytest.approx(0.4),
        }
        assert set(m["by_category"]) == {"productivity", "ops", "user_agent", "communication"}
        assert m["incomplete"] == ["T002_broken", "T003_chat", "T004_judged"]
        assert "claweval" in out and "pass^3" in out
    else:
        assert m["overall"]["mean_score"] == 0.5 and m["by_category"]["Files"]["tasks"] == 1
        assert m["incomplete"] == ["task_00002_answer_hybrid"]
