"""Child process: grade one QwenClawBench run with the benchmark's own ``lib_grading``.

Run by :class:`openforge.suites.qwenclawbench.grader.QwenClawBenchGrader` with the checkout's
``scripts/`` first on ``PYTHONPATH``; of OpenForge it imports only
:mod:`openforge.guest.common` (the request/result lines and the judge guard). Input on stdin:
``{checkout, tasks_dir, task_file, workspace, transcript, judge: {base_url, api_key, model}
| null}``. Output: ``GradeResult.to_dict()`` as the last stdout line.

It does what ``scripts/benchmark.py`` does after a run: ``TaskLoader.load_task`` and
``lib_grading.grade_task`` on ``{"status", "transcript", "workspace"}``, with the judge's
endpoint in ``JUDGE_BASE_URL`` / ``JUDGE_API_KEY`` where ``grade_task`` reads it. The first
failed judge request ends the grading (exit status 4): ``grade_task`` would retry it a hundred
times with growing back-off and then ask an OpenClaw agent to judge instead, so a judge engine
failure is the rollout's ``infra_error``, never a score.
"""

from __future__ import annotations

import os
from pathlib import Path

import lib_grading
from lib_grading import grade_task
from lib_tasks import TaskLoader

from openforge.guest.common import emit, fail_fast, judge_guard, read_request


def main() -> None:
    """Read the request, grade, print the result."""
    req = read_request()
    task = TaskLoader(Path(req["tasks_dir"])).load_task(Path(req["task_file"]))
    judge = req.get("judge") or {}
    if judge:
        os.environ["JUDGE_BASE_URL"] = judge["base_url"]
        os.environ["JUDGE_API_KEY"] = judge["api_key"]
    execution = {
        "status": "success",
        "transcript": req["transcript"],
        "workspace": req["workspace"],
    }
    kwargs = {"judge_model": judge["model"]} if judge else {}
    # grade_task would retry a failed judge request a hundred times (module docstring).
    fail_fast(lib_grading, "_call_llm_judge_api")
    with judge_guard():
        result = grade_task(
            task=task, execution_result=execution, skill_dir=Path(req["checkout"]), **kwargs
        )
    emit(result.to_dict())


if __name__ == "__main__":
    main()
