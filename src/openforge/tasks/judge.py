"""The LLM judge a benchmark's grader asks: where it is, as the run provides it.

:class:`Judge` is an OpenAI-compatible chat endpoint (``base_url`` ends in ``/v1``). In a run
the orchestrator mints, for each rollout, a judge-role key on the gateway (see
``openforge gateway --judge-engine``) and gives the task's grader
``Judge(base_url=<the gateway's model listener>/r/<judge key>/v1, api_key=<judge key>,
model=<the judge engine's model name>)``: every judge call is then recorded under that
rollout with role ``judge`` and never becomes training data, and a judge engine that fails
answers with an error, so the grading fails (the rollout's ``infra_error``), never a score.

A grader receives the judge through :meth:`openforge.tasks.grading.SuiteGrader.grade`
(``GradeInput.judge``), never by reading the environment itself. ``OPENFORGE_JUDGE_BASE_URL``,
``OPENFORGE_JUDGE_API_KEY`` and ``OPENFORGE_JUDGE_MODEL`` (:func:`judge_from_env`) remain a
fallback for graders run outside a gateway (``openforge tasks check``, a gateway without a
judge engine); :func:`resolve_judge` applies it. The simulated user of a multi-turn task is
reached through an endpoint of the same shape (a user-role key).

This module is the stable home of the type: graders of other suites (ClawEval,
QwenClawBench, WebVoyager, Online-Mind2Web) build on it. :func:`ask` asks a judge one
conversation in the host process, through the Chat Completions client side of
:mod:`openforge.dialects.openai_chat`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx
import orjson

from openforge.conversation import Conversation
from openforge.dialects.client import AnswerError
from openforge.dialects.openai_chat.client import ChatClient

__all__ = ["Judge", "JudgeFailed", "ask", "judge_from_env", "resolve_judge"]


class JudgeFailed(Exception):
    """The judge could not be asked or gave no readable answer; ``output`` holds what it
    answered (a grader's :class:`~openforge.tasks.grading.VerifierError`, never a score)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True, slots=True)
class Judge:
    """An OpenAI-compatible chat endpoint serving a suite's LLM judge (or simulated user)."""

    base_url: str  # ends in /v1: append /chat/completions
    api_key: str
    model: str

    def as_json(self) -> dict[str, str]:
        """The endpoint as a grading child process reads it."""
        return {"base_url": self.base_url, "api_key": self.api_key, "model": self.model}


def judge_from_env() -> Judge | None:
    """The judge named by ``OPENFORGE_JUDGE_*``, or None when none is configured."""
    url = os.environ.get("OPENFORGE_JUDGE_BASE_URL", "").strip()
    if not url:
        return None
    return Judge(
        base_url=url,
        api_key=os.environ.get("OPENFORGE_JUDGE_API_KEY", "none"),
        model=os.environ.get("OPENFORGE_JUDGE_MODEL", "judge"),
    )


def resolve_judge(given: Judge | None) -> Judge | None:
    """The run's judge when it gave one, else the external fallback from the environment."""
    return given if given is not None else judge_from_env()


async def ask(judge: Judge, conversation: Conversation, timeout_s: float) -> str:
    """The text of ``judge``'s answer to ``conversation`` (one request, no retry: a judge
    engine that fails is the grading's failure); :class:`JudgeFailed` when it cannot be had."""
    client = ChatClient()
    wire = client.request(conversation, judge.model, judge.api_key)
    url = judge.base_url.rstrip("/") + wire.path
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            resp = await http.post(url, content=wire.body, headers=dict(wire.headers))
    except httpx.HTTPError as exc:
        raise JudgeFailed(f"the judge at {judge.base_url} failed: {exc!r}") from exc
    if resp.status_code != 200:
        raise JudgeFailed(f"the judge answered HTTP {resp.status_code}", resp.text[:4000])
    try:
        data = orjson.loads(resp.content)
        if not isinstance(data, dict):
            raise AnswerError(f"the answer is not a JSON object: {resp.text[:300]}")
        return client.parse(data, judge.model).text
    except (orjson.JSONDecodeError, AnswerError, LookupError, TypeError, AttributeError) as exc:
        raise JudgeFailed(f"the judge's answer has no message: {exc!r}", resp.text) from exc
