"""ClawEval's own grader class on the trajectory of an OpenForge rollout.

After the agent stops: the task's grader-only files are put into the sandbox (never before,
so the agent cannot read them), ``env_snapshot_commands`` run there and
``env_snapshot_files`` are read back, as ClawEval's runner does. The trace ClawEval's runner
would have written is rebuilt (``trace.py``): the messages from the harness's transcript, the
tool dispatches and service audits from the MCP bridge's log (:mod:`openforge.environments`).
``grade_child.py`` then loads the task's ``AbstractGrader`` subclass from the checkout
(``claw_eval.graders.registry.get_grader``), calls ``grade`` with the parameters it accepts,
and scores with ``compute_task_score`` / ``is_pass``.

A task whose services did not run (no bridge log while the task declares services) cannot
be graded fairly: that is a :class:`VerifierError` (``infra_error``), never a score.
"""

from __future__ import annotations

import base64
import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforge.environments.services import (
    AUDIT_FILE,
    AUDIT_MAC,
    DISPATCH_LOG,
    STATUS_FILE,
    verified_audit,
)
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.fspaths import PathEscape
from openforge.suites.claweval.trace import (
    build_trace,
    claweval_messages,
    file_entry,
    made_by_the_model,
)
from openforge.suites.grading import run_suite_code
from openforge.tasks.grading import GradeInput, VerifierError, VerifyResult
from openforge.tasks.judge import Judge, resolve_judge
from openforge.tasks.transcript import Transcript

__all__ = ["ClawEvalGrader", "ClawEvalService", "ClawEvalSpec", "ClawEvalUser"]

# What ClawEval's runner puts before a simulated user's message in the conversation.
USER_PREFIX = "[user_agent]\n"

_DRIVER = Path(__file__).with_name("grade_child.py")
_GLOB = (
    "import glob, json, sys; print(json.dumps(sorted(glob.glob(sys.argv[1], recursive=True))[:50]))"
)


@dataclass(frozen=True, slots=True)
class ClawEvalService:
    """A mock service a task needs running (``services[]``)."""

    name: str
    command: str
    port: int
    health_check: str
    health_check_method: str
    ready_timeout: float
    reset_endpoint: str | None
    env: dict[str, str]


@dataclass(frozen=True, slots=True)
class ClawEvalSpec:
    """What running and grading a ClawEval task needs beyond :class:`Task`."""

    checkout: Path
    task_dir: Path
    task_yaml: Path
    tools: tuple[dict[str, Any], ...]  # name, description, input_schema
    endpoints: dict[str, tuple[str, str]]  # tool name -> (url, method)
    services: tuple[ClawEvalService, ...]
    max_turns: int
    grader_files: dict[str, Path] = field(default_factory=dict)
    snapshot_files: tuple[str, ...] = ()
    snapshot_commands: tuple[str, ...] = ()
    snapshot_timeout_s: float = 10.0
    local_grader_files: tuple[str, ...] = ()
    user_agent: bool = False


def _json_list(data: bytes) -> list[Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def _json_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; ``{}`` when it is not one."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class ClawEvalGrader:
    """Runs the task's own ``AbstractGrader`` on the rebuilt trace."""

    spec: ClawEvalSpec
    timeout_s: float = 900.0

    async def _snapshot(self, sandbox: Sandbox, workdir: str) -> dict[str, Any]:
        spec = self.spec
        snap: dict[str, Any] = {}
        for cmd in spec.snapshot_commands:
            res = await sandbox.exec(
                ["/bin/sh", "-c", cmd], cwd=workdir, timeout=spec.snapshot_timeout_s
            )
            snap[f"cmd:{cmd}"] = {
                "exit_code": -1 if res.timed_out else res.exit_code,
                "stdout": res.stdout.decode(errors="replace"),
                "stderr": res.stderr.decode(errors="replace"),
            }
        for pattern in spec.snapshot_files:
            paths = [pattern]
            if "*" in pattern or "?" in pattern:
                res = await sandbox.exec(
                    ["python3", "-I", "-c", _GLOB, pattern], cwd=workdir, timeout=60
                )
                lines = res.stdout.strip().splitlines() if res.exit_code == 0 else []
                found = _json_list(lines[-1]) if lines else []
                paths = [p for p in found if isinstance(p, str)]
            got: dict[str, bytes] = {}
            for p in paths:  # one at a time: a link the agent pointed outside is one miss
                with contextlib.suppress(PathEscape):
                    got.update(await sandbox.get([p]))
            for p in paths:
                snap[f"file:{p}"] = (
                    file_entry(got[p]) if p in got else {"error": f"File not found: {p}"}
                )
        for rel in spec.local_grader_files:
            local = spec.task_dir / rel
            snap[f"local_file:{rel}"] = (
                {"encoding": "base64", "content": base64.b64encode(local.read_bytes()).decode()}
                if local.is_file()
                else {"error": f"not found: {local}"}
            )
        return snap

    async def _bridge_log(
        self, sandbox: Sandbox, ran: bool
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The dispatch log and the audits. ``ran``: the model was called, so the harness
        started, which the supervisor allows only once every service is healthy; then a
        missing or failed status file is the agent's doing, not the services'."""
        got = await sandbox.get([DISPATCH_LOG, AUDIT_FILE, AUDIT_MAC, STATUS_FILE])
        if self.spec.services and not ran:
            names = ", ".join(s.name for s in self.spec.services)
            if STATUS_FILE not in got:
                raise VerifierError(
                    f"{self.spec.task_yaml}: the task's services ({names}) did not run in the "
                    "sandbox, so its grader would judge an agent that had no tools"
                )
            status = _json_object(got[STATUS_FILE])
            if not status.get("ok"):
                raise VerifierError(f"{self.spec.task_yaml}: {status.get('error')}")
        # Lines and audits the agent garbled are dropped, as a failed audit fetch is.
        lines = got.get(DISPATCH_LOG, b"").splitlines()
        dispatches = [d for d in map(_json_object, lines) if d]
        # A harness killed at its timeout leaves no audit; its graders see none, as
        # ClawEval's runner gives them none when an audit fetch fails.
        # An audit the supervisor did not sign (the agent wrote it) counts as none.
        signed = verified_audit(sandbox.id, got.get(AUDIT_FILE), got.get(AUDIT_MAC))
        audits = _json_object(signed or b"{}")
        return dispatches, audits

    async def grade(self, given: GradeInput) -> VerifyResult:
        """Put grader-only files in, snapshot, rebuild the trace, run the task's grader."""
        spec, sandbox, workdir = self.spec, given.sandbox, given.workdir
        root = workdir.rstrip("/")
        files = {f"{root}/{rel}": p.read_bytes() for rel, p in spec.grader_files.items()}
        if files:  # whatever the agent left at those paths (a link out, a directory) goes
            await sandbox.exec(["rm", "-rf", "--", *files], timeout=60)
            await sandbox.put(files)
        messages = claweval_messages(given.transcript.turns if given.transcript else ())
        ran = any(m["role"] == "assistant" for m in messages)
        dispatches, audits = await self._bridge_log(sandbox, ran)
        snapshot = await self._snapshot(sandbox, workdir)
        dispatches = made_by_the_model(messages, dispatches)
        events = build_trace(spec.task_yaml.parent.name, messages, dispatches, audits)
        judge = resolve_judge(given.judge)
        with tempfile.TemporaryDirectory(prefix="openforge-claweval-") as tmp:
            trace = Path(tmp) / "trace.jsonl"
            trace.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
            payload = {
                "checkout": str(spec.checkout),
                "task_yaml": str(spec.task_yaml),
                "task_dir": str(spec.task_dir),
                "trace": str(trace),
                "env_snapshot": snapshot,
                "judge": judge.as_json() if judge else None,
            }
            result, log = await run_suite_code(
                _DRIVER, [spec.checkout / "src"], spec.checkout, payload, self.timeout_s
            )
        score = result.get("task_score")
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise VerifierError(
                f"the ClawEval grader gave a task_score outside [0, 1]: {score!r}", log
            )
        return VerifyResult(reward=float(score), details=result, output=log)


@dataclass(frozen=True, slots=True)
class ClawEvalUser:
    """A ``multi_turn`` task's simulated user (``user_agent``): ClawEval's own ``UserAgent``
    from the checkout, in a child process, reached through the run's user-role endpoint.

    It reads the conversation so far as ClawEval ``Message`` objects rebuilt from the
    harness's transcript; its message reaches the agent as ClawEval's runner sends it
    (``[user_agent]`` then the text).
    """

    checkout: Path
    task_yaml: Path
    persona: str
    max_rounds: int
    timeout_s: float = 600.0

    async def reply(self, transcript: Transcript | None, endpoint: Judge | None) -> str | None:
        """The user's next message, or None when it said ``[DONE]``."""
        if endpoint is None:
            raise VerifierError(
                f"{self.task_yaml}: a multi_turn task needs a simulated user: start the "
                "gateway with --judge-engine (or --user-engine)"
            )
        payload = {
            "mode": "user",
            "persona": self.persona,
            "messages": claweval_messages(transcript.turns if transcript else ()),
            "user": endpoint.as_json(),
        }
        result, log = await run_suite_code(
            _DRIVER, [self.checkout / "src"], self.checkout, payload, self.timeout_s
        )
        text = result.get("reply")
        if text is not None and not isinstance(text, str):
            raise VerifierError(f"ClawEval's UserAgent answered {text!r}, not text", log)
        return None if text is None else USER_PREFIX + text
