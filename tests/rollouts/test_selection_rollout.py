"""``openforge rollout`` on one selected task, through the real orchestrator on the local
backend: a task chosen by ``--task`` from a bundled suite, and one QwenClawBench task file
given alone, which runs with its checkout's assets and is graded by its checkout's code."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest
from tests.tasks.qcb_sample import write_sample as write_qcb

from .conftest import OPENFORGE

pytestmark = pytest.mark.slow


async def _run(*args: str, tmp_path: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        OPENFORGE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


def _results(run: Path) -> list[dict[str, object]]:
    return [orjson.loads(x) for x in (run / "results.jsonl").read_bytes().splitlines()]


async def test_one_task_selected_from_a_suite_runs_alone(gateway: str, tmp_path: Path) -> None:
    rc, out = await _run(
        "rollout", "--tasks", "claw-mini", "--task", "hello-f*", "--harness", "shell",
        "-O", "command=printf 'hello\\n' > hello.txt", "--gateway", gateway,
        "--out", str(tmp_path / "run"), tmp_path=tmp_path,
    )  # fmt: skip
    assert rc == 0, out
    (result,) = _results(tmp_path / "run")
    assert (result["task_id"], result["status"], result["reward"]) == (
        "hello-file",
        "completed",
        1.0,
    )


async def test_one_qwenclawbench_task_file_runs_with_its_assets(
    gateway: str, tmp_path: Path
) -> None:
    root = write_qcb(tmp_path / "qcb")
    file = root / "data/sample-v1/tasks/task_00001_answer.md"
    file.write_text(file.read_text().replace("---\n", "---\nlicense: mit\n", 1))
    # The answer is written only when the task's asset and inline file are in the workspace.
    cmd = "test -f notes/input.txt && test -f config/settings.json && echo 42 > answer.txt"
    rc, out = await _run(
        "rollout", "--tasks", str(file), "--harness", "shell", "-O", f"command={cmd}",
        "--gateway", gateway, "--out", str(tmp_path / "run"), tmp_path=tmp_path,
    )  # fmt: skip
    assert rc == 0, out
    assert "openclaw.json" not in out and "not found" not in out
    (result,) = _results(tmp_path / "run")
    assert result["task_id"] == "task_00001_answer" and result["status"] == "completed", result
    # lib_grading's mean of 4 checks: the answer, the assets in place and the fence kept pass;
    # "transcript_shows_write" cannot, as the shell harness has no transcript.
    assert result["reward"] == 0.75, result
    # The frontmatter key QwenClawBench's loader does not read is named once, in the summary.
    warning = f"warning: qwenclawbench: {file}: license: unknown key, ignored"
    assert out.count(warning) == 1, out
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["task_warnings"] == [warning.removeprefix("warning: ")]
