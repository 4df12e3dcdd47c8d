"""Child process: grade one ClawEval trace with the task's own grader class.

Run by :class:`openforge.tasks.claweval_grader.ClawEvalGrader` with the checkout's ``src/``
first on ``PYTHONPATH`` and the checkout as cwd; it imports nothing of OpenForge. Input on
stdin: ``{checkout, task_yaml, task_dir, trace, env_snapshot, judge}``. Output (last stdout
line): ``{task_score, passed, scores, judge_calls}``.

This is what ``claw-eval grade`` does: ``TaskDefinition.from_yaml``, ``load_trace``,
``get_grader``, ``grader.grade`` with the optional parameters its signature accepts (as
``claw_eval.cli._grade_with_optional_params``), ``compute_task_score`` and ``is_pass``.
Without a judge the grader gets a stand-in that records any use: a grader that consults
its LLM judge cannot be scored without one (``claw-eval --no-judge`` would score its rubric
items 0), so this exits with status 3 and the rollout becomes ``infra_error``.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from claw_eval.graders.registry import get_grader
from claw_eval.models.scoring import compute_task_score, is_pass
from claw_eval.models.task import TaskDefinition
from claw_eval.trace.reader import load_trace


class _NoJudge:
    """The judge when none is configured; any use is remembered and fails the grading."""

    used = False

    def __getattr__(self, name: str) -> Any:
        _NoJudge.used = True
        raise RuntimeError(f"this grader calls its LLM judge (judge.{name}); none configured")


def _judge(spec: dict[str, str] | None) -> Any:
    if not spec:
        return _NoJudge()
    from claw_eval.graders.llm_judge import LLMJudge

    return LLMJudge(model_id=spec["model"], api_key=spec["api_key"], base_url=spec["base_url"])


def main() -> None:
    """Read the request, grade, print the result."""
    req = json.load(sys.stdin)
    task = TaskDefinition.from_yaml(req["task_yaml"])
    _start, messages, dispatches, media, _end, audit = load_trace(req["trace"])
    grader = get_grader(
        task.task_id, tasks_dir=Path(req["checkout"]) / "tasks", task_dir=req["task_dir"]
    )
    judge = _judge(req.get("judge"))
    params = inspect.signature(grader.grade).parameters
    kwargs: dict[str, Any] = {"audit_data": audit, "judge": judge}
    if "media_events" in params:
        kwargs["media_events"] = media
    if "env_snapshot" in params and req.get("env_snapshot") is not None:
        kwargs["env_snapshot"] = req["env_snapshot"]
    try:
        scores = grader.grade(messages, dispatches, task, **kwargs)
    finally:
        if _NoJudge.used:
            print(
                "the task's grader needs an LLM judge: set OPENFORGE_JUDGE_BASE_URL "
                "(and _API_KEY, _MODEL)",
                file=sys.stderr,
            )
            sys.exit(3)
    score = compute_task_score(scores)
    calls = [] if isinstance(judge, _NoJudge) else judge.get_call_log()
    out = {
        "task_score": score,
        "passed": is_pass(score),
        "scores": scores.model_dump(),
        "judge_calls": len(calls),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
