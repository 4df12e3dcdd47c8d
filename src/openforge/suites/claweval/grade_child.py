"""Child process: ClawEval's own code on one rollout: grade its trace with the task's grader
class, or (``"mode": "user"``) ask the task's simulated user for its next message.

Run by :class:`openforge.suites.claweval.grader.ClawEvalGrader` with the checkout's ``src/``
first on ``PYTHONPATH`` and the checkout as cwd; of OpenForge it imports only
:mod:`openforge.guest.common` (the request/result lines and the judge guard). Input on
stdin: ``{checkout, task_yaml, task_dir, trace, env_snapshot, judge}``. Output (last stdout
line): ``{task_score, passed, scores, judge_calls}``.

This is what ``claw-eval grade`` does: ``TaskDefinition.from_yaml``, ``load_trace``,
``get_grader``, ``grader.grade`` with the optional parameters its signature accepts (as
``claw_eval.cli._grade_with_optional_params``), ``compute_task_score`` and ``is_pass``.
Without a judge the grader gets a stand-in that records any use: a grader that consults
its LLM judge cannot be scored without one (``claw-eval --no-judge`` would score its rubric
items 0), so this exits with status 3 and the rollout becomes ``infra_error``. A judge whose
engine fails (the gateway answers an error) would be retried thirty times by ``LLMJudge`` and
then leave its rubric item unscored; the first failed request ends the grading instead (exit
status 4), so a judge failure is ``infra_error`` too, never a score.

The simulated user is ClawEval's ``claw_eval.runner.user_agent.UserAgent`` (its persona
prompt, transcript format and ``[DONE]`` stop word), given ``{persona, messages, user}`` and
answering ``{reply: text | null}``; its client fails fast too (``UserAgent`` would retry for
minutes and then end the conversation as if the user were satisfied).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from claw_eval.graders.registry import get_grader
from claw_eval.models.scoring import compute_task_score, is_pass
from claw_eval.models.task import TaskDefinition
from claw_eval.trace.reader import load_trace

from openforge.guest.common import NEEDS_JUDGE, emit, fail_fast, judge_guard, read_request


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

    judge = LLMJudge(model_id=spec["model"], api_key=spec["api_key"], base_url=spec["base_url"])
    fail_fast(judge.client.chat.completions, "create")
    return judge


def user_turn(req: dict[str, Any]) -> None:
    """Print the simulated user's next message (``null``: satisfied)."""
    from claw_eval.models.message import Message
    from claw_eval.runner.user_agent import UserAgent

    spec = req["user"]
    agent = UserAgent(model_id=spec["model"], api_key=spec["api_key"], base_url=spec["base_url"])
    fail_fast(agent.client.chat.completions, "create")
    messages = [Message.model_validate(m) for m in req["messages"]]
    with judge_guard("the simulated user's model"):
        reply = agent.generate_response(persona=req["persona"], conversation_messages=messages)
    emit({"reply": reply})


def main() -> None:
    """Read the request; grade (or answer as the user); print the result."""
    req = read_request()
    if req.get("mode") == "user":
        user_turn(req)
        return
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
        with judge_guard():
            scores = grader.grade(messages, dispatches, task, **kwargs)
    finally:
        if _NoJudge.used:
            print(
                "the task's grader needs an LLM judge: start the gateway with --judge-engine "
                "(or set OPENFORGE_JUDGE_BASE_URL, _API_KEY, _MODEL)",
                file=sys.stderr,
            )
            sys.exit(NEEDS_JUDGE)
    score = compute_task_score(scores)
    calls = [] if isinstance(judge, _NoJudge) else judge.get_call_log()
    out = {
        "task_score": score,
        "passed": is_pass(score),
        "scores": scores.model_dump(),
        "judge_calls": len(calls),
    }
    emit(out)


if __name__ == "__main__":
    main()
