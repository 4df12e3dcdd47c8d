"""QwenClawBench's own grading on an OpenForge rollout.

Grading runs the benchmark's ``lib_grading.grade_task`` from the checkout in a child process
(``grade_child.py``) on a host copy of the workspace and the transcript in OpenClaw's
session format, as ``scripts/benchmark.py`` does: the automated checks, the judge prompt and
parser, and the penalised hybrid combination with ``grading_weights`` are the benchmark's
own. Tasks with a judge part get the run's judge (a judge-role key on the gateway, so its calls
are recorded under the rollout and never trained on; else ``OPENFORGE_JUDGE_*``); without one
their rollouts are ``infra_error``, never a score. ``grade_task`` would retry a failing judge
API a hundred times and then fall back to an OpenClaw agent as judge; the grading child stops
at the first failed judge request instead, so a judge engine failure is ``infra_error``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openforge.suites.grading import run_suite_code, snapshot_workspace
from openforge.tasks.grading import GradeInput, VerifierError, VerifyResult
from openforge.tasks.judge import resolve_judge
from openforge.tasks.transcript import Transcript, Turn

__all__ = ["QwenClawBenchGrader", "openclaw_events", "session_transcript"]

_DRIVER = Path(__file__).with_name("grade_child.py")


@dataclass(frozen=True, slots=True)
class QwenClawBenchGrader:
    """The benchmark's own ``lib_grading`` on a copy of the workspace and the transcript."""

    checkout: Path
    tasks_dir: Path
    task_file: Path
    grading_type: str
    timeout_s: float = 900.0

    async def grade(self, given: GradeInput) -> VerifyResult:
        """Copy the workspace out and run ``lib_grading`` on it; a crash is a VerifierError."""
        judge = resolve_judge(given.judge) if self.grading_type != "automated" else None
        if self.grading_type != "automated" and judge is None:
            raise VerifierError(
                f"{self.task_file.name}: grading_type {self.grading_type} needs an LLM judge; "
                "start the gateway with --judge-engine, or set OPENFORGE_JUDGE_BASE_URL (and "
                "_API_KEY, _MODEL) to an OpenAI-compatible API"
            )
        with tempfile.TemporaryDirectory(prefix="openforge-qcb-") as tmp:
            ws = Path(tmp) / "workspace"
            copied = await snapshot_workspace(given.sandbox, given.workdir, ws)
            payload = {
                "checkout": str(self.checkout),
                "tasks_dir": str(self.tasks_dir),
                "task_file": str(self.task_file),
                "workspace": str(ws),
                "transcript": session_transcript(given.transcript),
                "judge": judge.as_json() if judge else None,
            }
            result, log = await run_suite_code(
                _DRIVER, [self.checkout / "scripts"], Path(tmp), payload, self.timeout_s
            )
        score = result.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise VerifierError(f"lib_grading gave a score outside [0, 1]: {score!r}", log)
        if copied is not None:
            result["workspace_not_copied"] = copied
        return VerifyResult(reward=float(score), details=result, output=log)


def session_transcript(transcript: Transcript | None) -> list[Any]:
    """The transcript as QwenClawBench's runner hands it to graders: OpenClaw's session events.

    OpenClaw's own session file is passed as it is; other harnesses' transcripts are
    rebuilt in that format.
    """
    if transcript is None:
        return []
    agent: list[list[Any]] = [
        list(events)
        for path, events in transcript.sessions.items()
        if "/agents/" in path
        and any(isinstance(e, dict) and e.get("type") == "message" for e in events)
    ]
    if agent:
        return max(agent, key=len)
    return openclaw_events(transcript.turns)


def openclaw_events(items: Sequence[Turn]) -> list[Any]:
    """The turns as OpenClaw session events, the transcript QwenClawBench's graders read."""
    out: list[Any] = []
    for t in items:
        if t.role == "tool":
            msg: dict[str, Any] = {
                "role": "toolResult",
                "toolCallId": t.tool_use_id,
                "toolName": t.tool_name,
                "content": [{"type": "text", "text": t.text}],
                "isError": t.is_error,
            }
        else:
            content: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
            content += [
                {"type": "toolCall", "id": u.id, "name": u.name, "arguments": u.arguments}
                for u in t.tool_uses
            ]
            msg = {"role": t.role, "content": content}
        out.append({"type": "message", "message": msg})
    return out
