"""QwenClawBench from a checkout: the loader reads the published layout (assets, inline
entries, a fence inside grader code), real harnesses run the tasks in bubblewrap sandboxes,
and the checkout's own ``lib_grading`` grades the transcript in OpenClaw's session format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnesses.conftest import require
from openforge.harnesses.registry import get_harness
from openforge.probing.probe import probe, tool_reply
from openforge.suites import load_tasks
from openforge.tasks.model import Task

from .judge import judge_endpoint
from .qcb_sample import write_sample

SOLVE = {
    "claw": [
        tool_reply("write", path="answer.txt", content="42\n"),
        tool_reply("submit", answer="The answer is 42."),
    ],
    "openclaw": [tool_reply("write", path="answer.txt", content="42\n"), {"text": "Done."}],
}


def _tasks(root: Path) -> dict[str, Task]:
    got = load_tasks(f"qwenclawbench:{root}")
    assert not got.errors, got.errors
    return got.by_id()


def test_the_published_layout_loads(tmp_path: Path) -> None:
    root = write_sample(tmp_path / "qcb")
    by = _tasks(root)
    task = by["task_00001_answer"]
    assert task.format == "qwenclawbench" and task.category == "Files"
    files = task.workspace_bytes()
    assert files["notes/input.txt"] == b"six times seven\n"  # from assets/<task_id>/
    assert files["config/settings.json"] == b'{"n": 7}'  # an inline entry
    assert task.instruction.startswith("Read notes/input.txt")
    # The checkout is recognised without the prefix, and from its dataset directory.
    assert set(load_tasks(root).by_id()) == set(by)
    assert set(load_tasks(f"qwenclawbench:{root}/data/sample-v1").by_id()) == set(by)


def test_a_missing_asset_names_the_file_and_field(tmp_path: Path) -> None:
    root = write_sample(tmp_path / "qcb")
    (root / "data/sample-v1/assets/task_00002_answer_hybrid/input.txt").unlink()
    got = load_tasks(f"qwenclawbench:{root}")
    assert [t.id for t in got.tasks] == ["task_00001_answer"]
    (err,) = got.errors
    assert err.file.endswith("task_00002_answer_hybrid.md")
    assert err.field == "workspace_files[0].source" and "input.txt" in err.problem


def test_another_layout_fails_with_one_message(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    got = load_tasks(f"qwenclawbench:{tmp_path}")
    assert not got.tasks
    (err,) = got.errors
    assert err.file.endswith("scripts/lib_grading.py") and "QwenClawBench" in err.problem


@pytest.mark.parametrize("harness", ["claw", "openclaw"])
async def test_a_solving_run_scores_1_from_its_transcript(harness: str, tmp_path: Path) -> None:
    require(harness)
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00001_answer"]
    run = await probe(get_harness(harness), SOLVE[harness], tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 1.0), run.result
    # The check that reads the transcript saw the write in OpenClaw's format.
    assert run.result.details["breakdown"]["transcript_shows_write"] == 1.0


async def test_a_no_op_run_scores_what_lib_grading_gives(tmp_path: Path) -> None:
    require("claw")
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00001_answer"]
    replies = [tool_reply("submit", answer="nothing")]
    run = await probe(get_harness("claw"), replies, tmp_path / "run", task=task)
    # assets_in_place and fence_kept hold; the answer and its write do not: 2 of 4.
    assert (run.result.status, run.result.reward) == ("completed", 0.5), run.result


async def test_hybrid_combines_with_the_judge_by_grading_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("claw")
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00002_answer_hybrid"]
    verdict = json.dumps({"scores": {"correct": 0.5}, "total": 0.5})
    async with judge_endpoint(tmp_path / "judge", verdict, monkeypatch):
        run = await probe(get_harness("claw"), SOLVE["claw"], tmp_path / "run", task=task)
    assert run.result.status == "completed", run.result
    assert run.result.reward == pytest.approx(0.4 * 1.0 + 0.6 * 0.5)


async def test_hybrid_without_a_judge_is_infra_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("claw")
    monkeypatch.delenv("OPENFORGE_JUDGE_BASE_URL", raising=False)
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00002_answer_hybrid"]
    run = await probe(get_harness("claw"), SOLVE["claw"], tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None)
    assert "needs an LLM judge" in (run.result.error or "")


async def test_a_grader_that_crashes_is_infra_error(tmp_path: Path) -> None:
    require("claw")
    root = write_sample(tmp_path / "qcb")
    md = root / "data/sample-v1/tasks/task_00001_answer.md"
    md.write_text(md.read_text().replace("    fence = ", "    1 / 0\n    fence = "))
    task = _tasks(root)["task_00001_answer"]
    run = await probe(get_harness("claw"), SOLVE["claw"], tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None)
    assert "ZeroDivisionError" in (run.result.verifier_output or "")


async def test_hybrid_gets_the_runs_judge_through_a_judge_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a judge engine on the gateway (and no OPENFORGE_JUDGE_*), the grader's judge is
    the rollout's judge-role key: the call is recorded under the rollout, role judge."""
    require("claw")
    monkeypatch.delenv("OPENFORGE_JUDGE_BASE_URL", raising=False)
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00002_answer_hybrid"]
    verdict = json.dumps({"scores": {"correct": 0.5}, "total": 0.5})
    run = await probe(
        get_harness("claw"), SOLVE["claw"], tmp_path / "run", task=task,
        judge_replies=[{"text": verdict}],
    )  # fmt: skip
    assert run.result.status == "completed", (run.result, run.result.verifier_output)
    assert run.result.reward == pytest.approx(0.4 * 1.0 + 0.6 * 0.5)
    judged = [c for c in run.calls if str(c.role) == "judge"]
    assert len(judged) == 1 and judged[0].completion["text"] == verdict
    asked = judged[0].conversation["messages"][-1]["content"][0]["text"]
    assert asked.startswith("Score the answer.")  # the task's rubric, as the suite asks it


async def test_a_failing_judge_engine_is_infra_error_not_a_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark retries a failing judge (here 20 times, 3 s apart) and then scores it
    0; OpenForge stops at the first failed request: the rollout is infra_error."""
    require("claw")
    monkeypatch.setenv("OPENFORGE_JUDGE_BASE_URL", "http://127.0.0.1:9/v1")  # nothing there
    task = _tasks(write_sample(tmp_path / "qcb"))["task_00002_answer_hybrid"]
    run = await probe(get_harness("claw"), SOLVE["claw"], tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None), run.result
    assert "the LLM judge failed" in (run.result.verifier_output or "")
