"""WebJudge: an LLM judge reads the task, what the agent did and the last screenshots, and
says whether it succeeded (Online-Mind2Web's WebJudge; WebVoyager's auto-evaluation).

The suites it grades (``loader.py``) are live websites with no state to check. The judge is
the one the run gives the grader (:class:`~openforge.tasks.judge.Judge`: a judge-role key on
the gateway, so its calls are recorded under the rollout with role ``judge`` and never
trained on), else ``OPENFORGE_JUDGE_*`` (:func:`~openforge.tasks.judge.resolve_judge`). No
judge, a judge that fails or answers without a verdict is a :class:`VerifierError`
(``infra_error``), never a 0. The final answer the judge reads is the one the policy
stated, from the gateway's record of its calls (``GradeInput.transcript.answer``, filled by
the orchestrator through the harness's :class:`~openforge.harnesses.base.StatesAnswer`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from openforge.conversation import (
    ContentPart,
    Conversation,
    ImagePart,
    Message,
    SamplingParams,
    TextPart,
)
from openforge.environments.browser import RESULT_FILE, SHOTS_DIR
from openforge.sandboxes.base import Sandbox, SandboxError
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.grading import GradeInput, VerifierError, VerifyResult
from openforge.tasks.judge import JudgeFailed, ask, resolve_judge

__all__ = ["KEEP_SCREENSHOTS", "WebJudgeGrader", "judge_conversation", "parse_verdict"]

# The last screenshots the environment keeps for the judge.
KEEP_SCREENSHOTS = 3

JUDGE_SYSTEM = """You are an expert evaluator of web agents. You get a task, the actions \
the agent took on the website, its final answer (if any) and screenshots of the last \
pages it saw. Decide whether the agent completed the task: every requirement of the task \
must be met, as shown by the screenshots or the answer; do not give credit for intent. \
First explain briefly, then end with exactly one line: "Status: success" or "Status: failure"."""


def parse_verdict(text: str) -> float | None:
    """1.0 for ``Status: success``, 0.0 for ``Status: failure`` (the last one said), else None."""
    verdict = None
    for line in text.splitlines():
        low = line.strip().strip("*").lower()
        if low.startswith("status:"):
            word = low.split(":", 1)[1].strip().strip("*\"'. ")
            if word in ("success", "failure"):
                verdict = 1.0 if word == "success" else 0.0
    return verdict


def judge_conversation(
    task: str, actions: list[str], answer: str | None, screenshots: list[bytes]
) -> Conversation:
    """What the judge is asked: the task, the action history, the answer, the screenshots;
    sampled greedily."""
    history = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(actions)) or "(no actions)"
    text = (
        f"Task: {task}\n\nAction history:\n{history}\n\nFinal answer: {answer or '(none)'}\n\n"
        f"The last {len(screenshots)} screenshot(s) follow, oldest first."
    )
    parts: list[ContentPart] = [TextPart(text)]
    for png in screenshots:
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        parts.append(ImagePart(url, media_type="image/png", data=png))
    messages = [Message("system", [TextPart(JUDGE_SYSTEM)]), Message("user", parts)]
    return Conversation(messages, params=SamplingParams(temperature=0.0))


def _action_line(step: dict[str, Any]) -> str:
    act = step.get("action") or {}
    args = ", ".join(f"{k}={v!r}" for k, v in act.items() if k != "action")
    err = f" (error: {step['error']})" if step.get("error") else ""
    return f"{act.get('action', '?')}({args}) on {step.get('url', '')}{err}"


@dataclass(frozen=True, slots=True)
class WebJudgeGrader:
    """Ask the judge whether the agent did ``task``, from what the environment recorded."""

    task: str
    timeout_s: float = 300.0
    home: str = SANDBOX_HOME

    async def grade(self, given: GradeInput) -> VerifyResult:
        """Read the environment's record and screenshots; one judge call; its verdict."""
        state, shots = await self._record(given.sandbox)
        judge = resolve_judge(given.judge)
        if judge is None:
            raise VerifierError(
                "this task is graded by an LLM judge; start the gateway with --judge-engine, "
                "or set OPENFORGE_JUDGE_BASE_URL (and _API_KEY, _MODEL) to an OpenAI-compatible API"
            )
        actions = [_action_line(s) for s in state.get("actions") or []]
        # The answer the policy stated, as the gateway recorded it (the browser agent's
        # Answer, Browser-Use's ``done`` text): never the result file's copy, which any
        # process with the sandbox's uid can write after killing the environment's server.
        answer = given.transcript.answer if given.transcript is not None else None
        conversation = judge_conversation(self.task, actions, answer, shots)
        try:
            text = await ask(judge, conversation, self.timeout_s)
        except JudgeFailed as exc:
            raise VerifierError(str(exc), exc.output) from exc
        verdict = parse_verdict(text)
        if verdict is None:
            raise VerifierError("the judge gave no 'Status: success|failure' line", text[-4000:])
        details = {"judge_model": judge.model, "judgement": text, "answer": answer}
        return VerifyResult(reward=verdict, details=details, output=text[-4000:])

    async def _record(self, sandbox: Sandbox) -> tuple[dict[str, Any], list[bytes]]:
        result = f"{self.home}/{RESULT_FILE}"
        shots_dir = f"{self.home}/{SHOTS_DIR}"
        try:
            got = await sandbox.get([result])
            listing = await sandbox.exec(["ls", "-1", shots_dir], timeout=30)
            names = sorted(n for n in listing.stdout.decode().split() if n.endswith(".png"))
            paths = [f"{shots_dir}/{n}" for n in names]
            pngs = await sandbox.get(paths) if paths else {}
        except SandboxError as exc:
            raise VerifierError(f"could not read the browser environment's record: {exc}") from exc
        if result not in got:
            raise VerifierError("no browser environment result: the environment never ran")
        try:
            state = json.loads(got[result])
        except ValueError as exc:
            raise VerifierError(f"the browser environment's result is not JSON: {exc}") from exc
        if state.get("error"):
            raise VerifierError(f"browser environment: {state['error']}")
        return state, [pngs[p] for p in paths if p in pngs]
