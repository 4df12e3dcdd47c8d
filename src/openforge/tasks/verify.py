"""Run a task's verifier in its sandbox and read its reward.

The verifier's contract: it runs with the sandbox workdir as its cwd and
``$OPENFORGE_VERIFY_DIR`` pointing at its own files, and prints
``{"reward": float in [0, 1], "details": any}`` as the **last non-empty line of stdout**.
Anything else (a crash, no such line, a reward outside [0, 1]) is a :class:`VerifierError`:
the rollout becomes ``infra_error`` with the verifier's output kept — never a zero reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from openforge.sandboxes.base import Sandbox, SandboxTimeout
from openforge.tasks.model import VERIFY_DIR, Task

__all__ = ["VerifierError", "VerifyResult", "parse_verifier_output", "run_verifier"]

_KEEP = 8000  # bytes of verifier output kept in a result


class VerifierError(Exception):
    """The verifier crashed, timed out or printed no valid reward line."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass(slots=True)
class VerifyResult:
    reward: float
    details: Any = None
    output: str = ""  # stdout + stderr tail, for debugging
    extra: dict[str, Any] = field(default_factory=dict)


def _tail(data: bytes) -> str:
    return data[-_KEEP:].decode("utf-8", errors="replace")


def parse_verifier_output(stdout: bytes) -> tuple[float, Any]:
    """The ``(reward, details)`` from a verifier's stdout, or :class:`VerifierError`."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise VerifierError("verifier printed nothing on stdout")
    try:
        obj = orjson.loads(lines[-1])
    except orjson.JSONDecodeError as exc:
        raise VerifierError(f"last stdout line is not JSON: {exc}") from exc
    if not isinstance(obj, dict) or "reward" not in obj:
        raise VerifierError('last stdout line must be an object with "reward"')
    reward = obj["reward"]
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        raise VerifierError(f"reward must be a number, got {reward!r}")
    if math.isnan(reward) or not 0.0 <= reward <= 1.0:
        raise VerifierError(f"reward must lie in [0, 1], got {reward!r}")
    return float(reward), obj.get("details")


async def run_verifier(sandbox: Sandbox, task: Task, workdir: str = "/workspace") -> VerifyResult:
    """Put the verifier's files into ``sandbox``, run it, and parse its reward."""
    await sandbox.put(task.verify_bytes())
    env = {"OPENFORGE_VERIFY_DIR": f"{workdir.rstrip('/')}/{VERIFY_DIR}"}
    try:
        res = await sandbox.exec(
            task.verify_command, env=env, cwd=workdir, timeout=task.verify_timeout_s
        )
    except SandboxTimeout as exc:
        raise VerifierError(f"verifier ran past {task.verify_timeout_s:g}s") from exc
    output = _tail(res.stdout) + ("\n--- stderr ---\n" + _tail(res.stderr) if res.stderr else "")
    if res.timed_out:
        raise VerifierError(f"verifier ran past {task.verify_timeout_s:g}s", output)
    if res.exit_code != 0:
        raise VerifierError(f"verifier exited with status {res.exit_code}", output)
    try:
        reward, details = parse_verifier_output(res.stdout)
    except VerifierError as exc:
        exc.output = output
        raise
    return VerifyResult(reward=reward, details=details, output=output)
