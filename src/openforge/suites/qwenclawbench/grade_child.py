"""Child process: grade one QwenClawBench run with the benchmark's own ``lib_grading``.

Run by :class:`openforge.suites.qwenclawbench.grader.QwenClawBenchGrader` with the checkout's
``scripts/`` first on ``PYTHONPATH``; it imports nothing of OpenForge. Input on stdin:
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

import json
import os
import sys
from pathlib import Path
from typing import Any

import lib_grading
from lib_grading import grade_task
from lib_tasks import TaskLoader


class JudgeFailed(BaseException):
    """A judge request failed. A BaseException, so ``grade_task``'s ``except Exception``
    retry loop cannot swallow it."""


def _fail_fast() -> None:
    call = lib_grading._call_llm_judge_api

    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            raise JudgeFailed(f"{type(exc).__name__}: {exc}") from None

    lib_grading._call_llm_judge_api = guarded


def main() -> None:
    """Read the request, grade, print the result."""
    req = json.load(sys.stdin)
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
    _fail_fast()
    try:
        result = grade_task(
            task=task, execution_result=execution, skill_dir=Path(req["checkout"]), **kwargs
        )
    except JudgeFailed as exc:
        print(f"the LLM judge failed: {exc}", file=sys.stderr)
        sys.exit(4)
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
