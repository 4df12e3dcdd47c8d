"""Run a task's verifier in its sandbox and read its reward.

The verifier's contract: it runs with the sandbox workdir as its cwd and
``$OPENFORGE_VERIFY_DIR`` pointing at its own files, and prints
``{"reward": float in [0, 1], "details": any}`` as the **last non-empty line of stdout**.
Anything else (a crash, no such line, a reward outside [0, 1]) is a :class:`VerifierError`:
the rollout becomes ``infra_error`` with the verifier's output kept — never a zero reward.

Harbor's contract (:class:`TestsVerifier`, also Terminal-Bench's): the tests are copied to
``/tests`` and ``bash /tests/test.sh`` runs in the agent's environment (its workdir, its
files, the task's env); the reward is ``/logs/verifier/reward.txt`` (one number) or
``reward.json`` (one or several keys), or, for Terminal-Bench's ``parser_name: pytest``, 1
when every test in pytest's summary passed. Exit 126/127, the verifier's own timeout, no
reward file, a pytest run that reported no tests, or a zero reward from a script that hit
``command not found`` (the check itself could not run): :class:`VerifierError`.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import orjson

from openforge.sandboxes.base import Sandbox, SandboxTimeout
from openforge.tasks.model import VERIFY_DIR, Task, TaskStep, TestsVerifier

__all__ = [
    "VerifierError",
    "VerifyResult",
    "aggregate_rewards",
    "parse_pytest_summary",
    "parse_verifier_output",
    "run_verifier",
]

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


async def run_verifier(
    sandbox: Sandbox, task: Task, workdir: str = "/workspace", step: TaskStep | None = None
) -> VerifyResult:
    """Put the verifier's files into ``sandbox``, run it, and parse its reward.

    ``step`` runs that step's verifier (multi-step tasks); a task with Harbor's contract
    (``task.tests``) runs its tests in place.
    """
    tests = step.verifier if step is not None else task.tests
    if tests is not None:
        env = task.environment.env if task.environment else {}
        return await _run_tests(sandbox, tests, workdir, env)
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


_STAGE = "/tmp/.openforge-tests"
_SUMMARY = re.compile(rb"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)", re.M)
# bash's and sh's words for a command that is not there: the check itself could not run.
# (A missing *file* is not on the list: that is what a wrong answer usually looks like.)
_NOT_RUN = re.compile(
    rb"^.*(command not found|: \d+: \S+: not found|cd: .*No such file or directory|can.t cd to).*$",
    re.M,
)


def aggregate_rewards(rewards: dict[str, float], key: str | None) -> float:
    """One reward from a reward file's keys: ``key``, else ``reward``, else their mean."""
    if key is not None:
        if key not in rewards:
            raise VerifierError(f"reward.json has no key {key!r} (has {sorted(rewards)})")
        return rewards[key]
    if "reward" in rewards:
        return rewards["reward"]
    if not rewards:
        raise VerifierError("reward.json holds no rewards")
    return sum(rewards.values()) / len(rewards)


def parse_pytest_summary(output: bytes) -> dict[str, str]:
    """Test id -> outcome from pytest's ``-rA`` short test summary (Terminal-Bench's parser)."""
    _, sep, summary = output.rpartition(b"short test summary info")
    return {m[1].decode(): m[0].decode() for m in _SUMMARY.findall(summary)} if sep else {}


def _reward_file(files: dict[str, bytes]) -> dict[str, float]:
    if "reward.json" in files:
        try:
            data = orjson.loads(files["reward.json"])
        except orjson.JSONDecodeError as exc:
            raise VerifierError(f"reward.json is not JSON: {exc}") from exc
        if isinstance(data, int | float) and not isinstance(data, bool):
            data = {"reward": data}
        if not isinstance(data, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()
        ):
            raise VerifierError(f"reward.json must map names to numbers, got {data!r}"[:300])
        return {str(k): float(v) for k, v in data.items()}
    text = files["reward.txt"].decode(errors="replace").strip()
    try:
        return {"reward": float(text)}
    except ValueError:
        raise VerifierError(f"reward.txt must hold one number, got {text[:100]!r}") from None


async def _read_logs(sandbox: Sandbox) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for name in ("reward.json", "reward.txt"):
        res = await sandbox.exec(["cat", f"/logs/verifier/{name}"], timeout=30)
        if res.exit_code == 0:
            found[name] = res.stdout
    return found


async def _run_tests(
    sandbox: Sandbox, tests: TestsVerifier, workdir: str, task_env: dict[str, str]
) -> VerifyResult:
    """Harbor's verifier contract, in the sandbox the agent used."""
    await sandbox.put({f"{_STAGE}/{rel}": p.read_bytes() for rel, p in tests.tests.items()})
    stage = (
        f"rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier && "
        f"cp -R {_STAGE}/. /tests/ && rm -rf {_STAGE}"
    )
    res = await sandbox.exec(["sh", "-c", stage], timeout=60)
    if res.exit_code == 0:  # and still there for the next exec (not on the local backend)
        res = await sandbox.exec(["test", "-f", f"/tests/{tests.entry}"], timeout=30)
    if res.exit_code != 0:
        raise VerifierError(
            "cannot put the tests in /tests (the local backend has no task environment: "
            "run tasks that bring one on --backend podman)",
            _tail(res.stdout + res.stderr),
        )
    env = {**task_env, **tests.env}
    try:
        res = await sandbox.exec(
            ["bash", f"/tests/{tests.entry}"], env=env, cwd=workdir, timeout=tests.timeout_s
        )
    except SandboxTimeout as exc:
        raise VerifierError(f"verifier ran past {tests.timeout_s:g}s") from exc
    output = _tail(res.stdout) + ("\n--- stderr ---\n" + _tail(res.stderr) if res.stderr else "")
    if res.timed_out:
        raise VerifierError(f"verifier ran past {tests.timeout_s:g}s", output)
    if res.exit_code in (126, 127):
        cmd = shlex.join(["bash", f"/tests/{tests.entry}"])
        raise VerifierError(f"verifier could not run ({cmd} exited {res.exit_code})", output)
    details: dict[str, Any] = {"exit_code": res.exit_code}
    if tests.parser == "pytest":
        results = parse_pytest_summary(res.stdout + b"\n" + res.stderr)
        if not results:
            raise VerifierError("the tests printed no pytest summary (did pytest run?)", output)
        details["tests"] = results
        reward = float(all(v in ("PASSED", "XFAIL") for v in results.values()))
    else:
        files = await _read_logs(sandbox)
        if not files:
            raise VerifierError(
                f"no /logs/verifier/reward.txt or reward.json (test script exited {res.exit_code})",
                output,
            )
        rewards = _reward_file(files)
        details["rewards"] = rewards
        reward = aggregate_rewards(rewards, tests.reward_key)
    if reward == 0.0 and (hit := _NOT_RUN.search(res.stdout + b"\n" + res.stderr)):
        line = hit.group(0).decode(errors="replace")
        raise VerifierError(
            f"verifier could not run its check ({line}); reward 0 discarded", output
        )
    if math.isnan(reward) or not 0.0 <= reward <= 1.0:
        raise VerifierError(f"reward must lie in [0, 1], got {reward!r}", output)
    return VerifyResult(reward=reward, details=details, output=output)
