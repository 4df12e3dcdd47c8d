"""Run a task's verifier in its sandbox and read its reward.

The verifier's contract: it runs with the sandbox workdir as its cwd and
``$OPENFORGE_VERIFY_DIR`` pointing at its own files, and reports
``{"reward": float in [0, 1], "details": any}`` through ``openforge_verify.done`` (on the
reward channel only it can open; see ``sandboxes/verifier.py``) or, for a verifier that
does not import ``openforge_verify``, as the **last non-empty line of stdout**. It runs
through ``Sandbox.exec_verifier``: the agent's processes killed, its directory and
environment made anew, as another uid where the backend has one. Anything else (a crash,
its timeout, no reward) is a :class:`VerifierError` marked ``agent_reachable`` (it ran over
what the agent left), which the rollout resolves to 0 or ``infra_error`` by running the
verifier again where no agent was.

Harbor's contract (:class:`TestsVerifier`, also Terminal-Bench's): the tests are copied to
``/tests`` and ``bash /tests/test.sh`` runs in the agent's environment (its workdir, its
files, the task's env) as the container's root with root's home as ``$HOME``, as both
benchmarks' harnesses run them; the reward is ``/logs/verifier/reward.txt`` (one number) or
``reward.json`` (one or several keys; preferred when both are there, as Harbor does), or, for
Terminal-Bench's ``parser_name: pytest``, 1 when every test in pytest's summary passed.
``/tests`` and ``/logs/verifier`` are made afresh just before the tests run (after the
episode ended what the agent left running), so nothing of the agent's is in them. Exit
126/127, the verifier's own timeout, a test script killed by a signal, no reward file, one
over 64 KiB, a pytest run that reported no tests, or a zero reward from a script that hit
``command not found``: a :class:`VerifierError` marked ``agent_reachable`` (the agent owned
that environment), which the rollout resolves to 0 or ``infra_error`` by running the
verifier again where no agent was.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shlex
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from openforge.sandboxes.base import ExecResult, Sandbox, SandboxError, SandboxTimeout
from openforge.sandboxes.runtime import SANDBOX_WORKDIR
from openforge.sandboxes.verifier import VerifierExec, VerifierRun
from openforge.tasks.grading import VerifierError, VerifyResult
from openforge.tasks.model import VERIFY_DIR, Task, TaskStep, TestsVerifier

__all__ = [
    "aggregate_rewards",
    "parse_pytest_summary",
    "parse_verifier_output",
    "run_native_verifier",
    "run_verifier",
]

_KEEP = 8000  # bytes of verifier output kept in a result


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
    sandbox: Sandbox,
    task: Task,
    workdir: str = SANDBOX_WORKDIR,
    step: TaskStep | None = None,
    given: Mapping[str, bytes] | None = None,
) -> VerifyResult:
    """Run the task's verifier in ``sandbox`` and parse its reward.

    ``step`` runs that step's verifier (multi-step tasks); a task with Harbor's contract
    (``task.tests``) runs its tests in place. ``given``: more files for the verifier's own
    directory, from the host (the stated answer of a GUI task, ``environments/base.py``).
    """
    tests = step.verifier if step is not None else task.tests
    if tests is not None:
        env = task.environment.env if task.environment else {}
        return await _run_tests(sandbox, tests, workdir, env)
    prefix = f"{VERIFY_DIR}/"
    run = VerifierExec(
        cmd=task.verify_command,
        files={k.removeprefix(prefix): v for k, v in task.verify_bytes().items()}
        | dict(given or {}),
        dir=VERIFY_DIR,
        env=dict(task.environment.env) if task.environment else {},
        timeout=task.verify_timeout_s,
    )
    return await run_native_verifier(sandbox, run)


async def run_native_verifier(sandbox: Sandbox, run: VerifierExec) -> VerifyResult:
    """Run ``run`` over what the agent left (``Sandbox.exec_verifier``) and read its reward.

    Every failure is an ``agent_reachable`` :class:`VerifierError`: the agent's files were
    its input. A verifier that could not even be set up while the sandbox still answers (the
    agent filled or broke what it needed) is one too; a sandbox that does not answer stays a
    :class:`SandboxError` (infra).
    """
    try:
        got = await sandbox.exec_verifier(run)
    except SandboxError as exc:
        try:
            await sandbox.get([])  # the sandbox (sandboxd, the local backend) still answers
        except SandboxError:
            raise exc from None
        raise VerifierError(
            f"the verifier could not be set up: {exc}", agent_reachable=True
        ) from exc
    try:
        return _verdict(got, run.timeout)
    except VerifierError as exc:
        exc.agent_reachable = True
        raise


def _output(got: VerifierRun) -> str:
    res = got.result
    out = _tail(res.stdout) + ("\n--- stderr ---\n" + _tail(res.stderr) if res.stderr else "")
    if got.notes:
        out += "\n--- undone before the verifier ran ---\n" + "\n".join(got.notes)
    return out


def _verdict(got: VerifierRun, timeout: float | None) -> VerifyResult:
    """The reward of one verifier run: from its channel, else (a verifier that never
    opened it) from its stdout's last line."""
    res, output = got.result, _output(got)
    lines = [ln for ln in got.channel.splitlines() if ln.strip()]
    rewards = [ln for ln in lines if b'"reward"' in ln]
    if rewards:
        try:
            reward, details = parse_verifier_output(rewards[-1])
        except VerifierError as exc:
            exc.output = output
            raise
        return VerifyResult(reward=reward, details=details, output=output)
    if res.timed_out:
        raise VerifierError(f"verifier ran past {timeout or 0:g}s", output)
    if lines:  # openforge_verify took the channel: stdout is not the verifier's word
        raise VerifierError(f"verifier exited with status {res.exit_code} and no reward", output)
    if res.exit_code != 0:
        raise VerifierError(f"verifier exited with status {res.exit_code}", output)
    try:
        reward, details = parse_verifier_output(res.stdout)
    except VerifierError as exc:
        exc.output = output
        raise
    return VerifyResult(reward=reward, details=details, output=output)


_LOGS = "/logs/verifier"
# The tests' $HOME: Harbor's and Terminal-Bench's harnesses run them as the container's root,
# whose home this is (not the agent's $HOME, where its harness keeps its files). Their
# templates rely on it: `source $HOME/.local/bin/env` after uv's installer (DevEval's under
# `set -e`), and an offline base image carries that file in root's home. The agent is root
# in that container for its whole turn, so this directory is no more its own than the
# agent's home or /usr/local/bin, which the tests used or use anyway: nothing is handed to it.
_TESTS_HOME = "/root"
# A reward file is one number or a small JSON object; anything larger is a flood.
_MAX_REWARD_FILE = 64 * 1024
# Exit statuses of a shell killed by a signal (128 + N, N in 1..64).
_KILLED_MIN, _KILLED_MAX = 129, 192
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
    """Test id -> outcome from pytest's ``-rA`` short test summary (Terminal-Bench's parser).

    The tests may run the agent's code, which can print a summary of its own after (or
    before) pytest's: every summary in the output is read and a test keeps the worst
    outcome any of them gives it, so a forged all-PASSED block cannot hide a failure that
    pytest reported.
    """
    sections = output.split(b"short test summary info")[1:]
    found: dict[str, str] = {}
    for section in sections:
        for outcome, test in _SUMMARY.findall(section):
            name, said = test.decode(), outcome.decode()
            if found.get(name) in (None, "PASSED", "XFAIL") or said in ("FAILED", "ERROR"):
                found[name] = said
    return found


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


async def _exec(sandbox: Sandbox, cmd: list[str], **kw: Any) -> ExecResult:
    """``sandbox.exec`` in the agent's environment: a command that cannot even start there
    while the sandbox still answers (the agent removed ``bash``, ``sh`` or ``tar``) is an
    ``agent_reachable`` :class:`VerifierError`; a sandbox that does not answer stays a
    :class:`SandboxError` (infra)."""
    try:
        return await sandbox.exec(cmd, **kw)
    except SandboxTimeout:
        raise
    except SandboxError as exc:
        try:
            await sandbox.get([])  # sandboxd (or the local backend) still answers
        except SandboxError:
            raise exc from None
        raise VerifierError(f"cannot start {cmd[0]}: {exc}", agent_reachable=True) from exc


def _tar(files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, path in sorted(files.items()):
            data = path.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size, info.mode = len(data), 0o755 if os.access(path, os.X_OK) else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def _read_logs(sandbox: Sandbox) -> dict[str, bytes]:
    """The reward files the tests wrote: regular files only (a FIFO would block the read),
    each read up to :data:`_MAX_REWARD_FILE` bytes (a flood is refused, never loaded)."""
    found: dict[str, bytes] = {}
    for name in ("reward.json", "reward.txt"):
        read = '[ -f "$1" ] || exit 3; exec head -c $2 "$1"'
        path, limit = f"{_LOGS}/{name}", str(_MAX_REWARD_FILE + 1)
        res = await _exec(sandbox, ["sh", "-c", read, "sh", path, limit], timeout=30)
        if res.exit_code == 3 and not res.timed_out:
            continue
        if res.exit_code != 0 or res.timed_out:
            raise VerifierError(f"cannot read {path} (exit {res.exit_code})", agent_reachable=True)
        if len(res.stdout) > _MAX_REWARD_FILE:
            raise VerifierError(
                f"{path} is larger than {_MAX_REWARD_FILE} bytes", agent_reachable=True
            )
        found[name] = res.stdout
    return found


async def _stage_tests(sandbox: Sandbox, tests: TestsVerifier) -> None:
    """Fresh ``/tests`` (only the task's files) and an empty ``/logs/verifier``.

    The files travel as a tar on the exec's stdin, never through a path the agent could have
    prepared (a planted ``conftest.py`` in a staging directory, a symlinked ``/tmp``); a
    ``/logs`` that is not a plain directory is replaced.
    """
    stage = (
        "rm -rf /tests /logs/verifier && { [ -d /logs ] && [ ! -L /logs ] || rm -rf /logs; } && "
        "mkdir -p /tests /logs/verifier && tar -xf - -C /tests --no-same-owner"
    )
    res = await _exec(sandbox, ["sh", "-c", stage], timeout=60, stdin=_tar(tests.tests))
    if res.exit_code == 0 and not res.timed_out:  # and still there for the next exec
        res = await _exec(sandbox, ["test", "-f", f"/tests/{tests.entry}"], timeout=30)
    if res.exit_code != 0 or res.timed_out:
        raise VerifierError(
            "cannot put the tests in /tests (the local backend has no task environment: "
            "run tasks that bring one on --backend podman)",
            _tail(res.stdout + res.stderr),
            agent_reachable=True,
        )


async def _run_tests(
    sandbox: Sandbox, tests: TestsVerifier, workdir: str, task_env: dict[str, str]
) -> VerifyResult:
    """Harbor's verifier contract, in the sandbox the agent used (its leftover processes
    ended by the episode). Every failure here happens where the agent had its hands, so each
    is ``agent_reachable``: the rollout tells the agent's doing from a broken verifier by
    running the verifier where no agent was (``tasks/oracle.py``)."""
    await _stage_tests(sandbox, tests)
    try:
        return await _test_verdict(sandbox, tests, workdir, task_env)
    finally:
        # A later step's agent turn must not find this step's tests or reward.
        with contextlib.suppress(SandboxError):
            await sandbox.exec(["rm", "-rf", "/tests", _LOGS], timeout=60)


async def _test_verdict(
    sandbox: Sandbox, tests: TestsVerifier, workdir: str, task_env: dict[str, str]
) -> VerifyResult:
    """Run the staged tests and read their reward."""
    env = {"HOME": _TESTS_HOME, **task_env, **tests.env}
    cmd = ["bash", f"/tests/{tests.entry}"]
    try:
        res = await _exec(sandbox, cmd, env=env, cwd=workdir, timeout=tests.timeout_s)
    except SandboxTimeout as exc:
        raise VerifierError(
            f"verifier ran past {tests.timeout_s:g}s", agent_reachable=True
        ) from exc
    output = _tail(res.stdout) + ("\n--- stderr ---\n" + _tail(res.stderr) if res.stderr else "")
    if res.timed_out:
        raise VerifierError(f"verifier ran past {tests.timeout_s:g}s", output, agent_reachable=True)
    if res.exit_code in (126, 127):
        raise VerifierError(
            f"verifier could not run ({shlex.join(cmd)} exited {res.exit_code})",
            output,
            agent_reachable=True,
        )
    if _KILLED_MIN <= res.exit_code <= _KILLED_MAX:
        # The test script itself died of a signal (a child it ran killed its process group):
        # whatever reward file is there was not the script's last word.
        raise VerifierError(
            f"the tests were killed (signal {res.exit_code - 128}); no reward is read",
            output,
            agent_reachable=True,
        )
    details: dict[str, Any] = {"exit_code": res.exit_code}
    if tests.parser == "pytest":
        results = parse_pytest_summary(res.stdout + b"\n" + res.stderr)
        if not results:
            raise VerifierError(
                "the tests printed no pytest summary (did pytest run?)",
                output,
                agent_reachable=True,
            )
        details["tests"] = results
        reward = float(all(v in ("PASSED", "XFAIL") for v in results.values()))
    else:
        files = await _read_logs(sandbox)
        if not files:
            raise VerifierError(
                f"no {_LOGS}/reward.txt or reward.json (test script exited {res.exit_code})",
                output,
                agent_reachable=True,
            )
        try:
            rewards = _reward_file(files)
            both = _reward_file({"reward.txt": files["reward.txt"]}) if len(files) == 2 else {}
        except VerifierError as exc:
            exc.output, exc.agent_reachable = output, True
            raise
        details["rewards"] = rewards
        reward = aggregate_rewards(rewards, tests.reward_key)
        if both and both["reward"] != reward:
            # Tests that write both files write one reward twice; two rewards mean something
            # besides the test script wrote one (the agent's code it ran, say).
            raise VerifierError(
                f"reward.json says {reward:g} but reward.txt says {both['reward']:g}",
                output,
                agent_reachable=True,
            )
    if reward == 0.0 and (hit := _NOT_RUN.search(res.stdout + b"\n" + res.stderr)):
        line = hit.group(0).decode(errors="replace")
        raise VerifierError(
            f"verifier could not run its check ({line}); reward 0 discarded",
            output,
            agent_reachable=True,
        )
    if math.isnan(reward) or not 0.0 <= reward <= 1.0:
        raise VerifierError(
            f"reward must lie in [0, 1], got {reward!r}", output, agent_reachable=True
        )
    return VerifyResult(reward=reward, details=details, output=output)
