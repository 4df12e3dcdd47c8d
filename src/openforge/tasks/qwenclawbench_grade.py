"""Child process: grade one QwenClawBench run with the benchmark's own ``lib_grading``.

Run by :class:`openforge.tasks.qwenclawbench.QwenClawBenchGrader` with the checkout's
``scripts/`` first on ``PYTHONPATH``; it imports nothing of OpenForge. Input on stdin:
``{checkout, tasks_dir, task_file, workspace, transcript, judge: {base_url, api_key, model}
| null}``. Output: ``GradeResult.to_dict()`` as the last stdout line.

It does what ``scripts/benchmark.py`` does after a run: ``TaskLoader.load_task`` and
``lib_grading.grade_task`` on ``{"status", "transcript", "workspace"}``, with the judge's
endpoint in ``JUDGE_BASE_URL`` / ``JUDGE_API_KEY`` where ``grade_task`` reads it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lib_grading import grade_task
from lib_tasks import TaskLoader


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
    result = grade_task(
        task=task, execution_result=execution, skill_dir=Path(req["checkout"]), **kwargs
    )
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
