"""The oracle check: does a task's own reference solution pass in its environment, and does
doing nothing fail? A task that fails either is quarantined before any rollout is spent on it.

For each task, two episodes in fresh sandboxes of the task's real environment (its own image
on the container backends): the **oracle** runs the reference solution (``solution/solve.sh``,
per step for multi-step tasks, in ``/solution`` for tasks with their own environment and in
``.solution/`` of the workdir otherwise) and must score 1; the **no-op** agent does nothing
and must score below 1. An episode that cannot run (build failure, verifier that cannot run)
quarantines the task too, with that reason. Verdicts are cached per task content hash
(every file of the task directory) under ``openforge_home()/task-checks/``.

A GUI task's episodes run with its environment up, as a harness's do: ``solve.sh`` (and the
no-op's ``true``) runs wrapped by it, so a browser task's solution drives the page through
``$OPENFORGE_BROWSER_URL`` and the no-op shows what the untouched page scores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from openforge.environments.base import UNAVAILABLE_STATUS
from openforge.home import openforge_home
from openforge.sandboxes.base import ExecResult, Sandbox, SandboxBackend, SandboxError
from openforge.sandboxes.runtime import SANDBOX_HOME, SANDBOX_WORKDIR
from openforge.tasks.episode import (
    NEEDS_CONTAINER,
    Act,
    Turn,
    TurnOutcome,
    run_episode,
    sandbox_spec,
)
from openforge.tasks.grading import VerifierError
from openforge.tasks.model import Task

__all__ = ["CheckResult", "check_task", "check_tasks", "task_hash", "verifier_runs_untouched"]

_STAGE = "/tmp/.openforge-solution"
_CACHE_VERSION = 1


@dataclass(slots=True)
class CheckResult:
    """One task's verdict: ``ok`` unless quarantined, with the reason."""

    task_id: str
    ok: bool
    oracle: float | None  # the reference solution's reward (None: it could not run)
    noop: float | None  # the untouched environment's reward
    reason: str = ""
    cached: bool = False


def task_hash(task: Task) -> str:
    """A hash of every file of the task (its directory, or its one file)."""
    h = hashlib.sha256(f"v{_CACHE_VERSION}\0{task.id}\0{task.format}".encode())
    root = task.path
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        h.update(f"\0{p.relative_to(root.parent).as_posix()}\0".encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:24]


def _cache_dir() -> Path:
    return openforge_home() / "task-checks"


def _solver(box: Sandbox, task: Task, workdir: str) -> Act:
    """The oracle agent: run the turn's ``solve.sh`` the way the task's suite does."""
    own_env = task.environment is not None
    env = {**(task.environment.env if task.environment else {}), **task.solution_env}

    async def act(turn: Turn) -> TurnOutcome:
        if "solve.sh" not in turn.solution:
            return TurnOutcome("agent_error", None, "the task has no solution/solve.sh")
        files = {rel: p.read_bytes() for rel, p in turn.solution.items()}
        if own_env:
            await box.put({f"{_STAGE}/{rel}": data for rel, data in files.items()})
            stage = f"rm -rf /solution && mkdir -p /solution && cp -R {_STAGE}/. /solution/"
            res = await box.exec(["sh", "-c", f"{stage} && rm -rf {_STAGE}"], timeout=60)
            if res.exit_code != 0:
                raise SandboxError(f"cannot put the solution in /solution: {res.stderr[-500:]!r}")
            cmd = ["bash", "/solution/solve.sh"]
        else:
            await box.put({f".solution/{rel}": data for rel, data in files.items()})
            cmd = ["sh", "-c", "sh .solution/solve.sh; rc=$?; rm -rf .solution; exit $rc"]
        res = await _run_wrapped(box, task, cmd, env, workdir, turn.timeout_s)
        if res.timed_out:
            return TurnOutcome("timeout", None, f"solve.sh ran past {turn.timeout_s:g}s")
        if res.exit_code != 0:
            tail = (res.stdout + res.stderr)[-400:].decode(errors="replace")
            return TurnOutcome(
                "agent_error", res.exit_code, f"solve.sh exited {res.exit_code}: {tail}"
            )
        return TurnOutcome()

    return act


async def _run_wrapped(
    box: Sandbox, task: Task, cmd: list[str], env: dict[str, str], workdir: str, timeout: float
) -> ExecResult:
    """``cmd`` run as a harness is: inside the task's GUI environment when it has one."""
    if task.gui is not None:
        await task.gui.prepare(box, SANDBOX_HOME)
        cmd = task.gui.wrap_argv(cmd, SANDBOX_HOME)
    res = await box.exec(cmd, env=env, cwd=workdir, timeout=timeout)
    if task.gui is not None and res.exit_code == UNAVAILABLE_STATUS and not res.timed_out:
        tail = res.stderr[-400:].decode(errors="replace")
        raise SandboxError(f"the task's GUI environment did not come up: {tail}")
    return res


def _noop(box: Sandbox, task: Task, workdir: str) -> Act:
    """The no-op agent: nothing done (with a GUI task's environment up and left alone)."""

    async def act(turn: Turn) -> TurnOutcome:
        if task.gui is not None:
            await _run_wrapped(box, task, ["true"], {}, workdir, turn.timeout_s)
        return TurnOutcome()

    return act


async def _score(
    backend: SandboxBackend, task: Task, workdir: str, oracle: bool, internet: bool
) -> float:
    if task.environment is not None and backend.name == "local":
        raise SandboxError(NEEDS_CONTAINER)
    spec = sandbox_spec(task, workdir)
    # Neither the oracle nor the no-op talks to a model; the internet only when allowed.
    spec.network = "open" if internet and task.wants_internet else "none"
    box = await backend.create(spec)
    try:
        act = _solver(box, task, spec.workdir) if oracle else _noop(box, task, spec.workdir)
        episode = await run_episode(box, task, spec.workdir, act)
    finally:
        await box.close()
    if episode.outcome.status != "completed":
        raise VerifierError(f"the reference solution failed: {episode.outcome.error}")
    return episode.reward


async def verifier_runs_untouched(
    backend: SandboxBackend, task: Task, workdir: str = SANDBOX_WORKDIR
) -> bool:
    """Whether ``task``'s verifier gives a reward in its environment when no agent touched
    it: the check, independent of any agent's workspace, that tells an agent breaking the
    verifier (reward 0) from a verifier that is broken anyway (``infra_error``).

    A cached oracle verdict whose no-op episode was scored answers at once; otherwise the
    no-op episode runs now in a fresh sandbox. :class:`SandboxError` when that cannot run.
    """
    cache = _cache_dir() / f"{task_hash(task)}.json"
    if cache.is_file():
        with contextlib.suppress(orjson.JSONDecodeError, OSError):
            if orjson.loads(cache.read_bytes()).get("noop") is not None:
                return True
    try:
        await _score(backend, task, workdir, False, False)
    except VerifierError:
        return False
    return True


async def check_task(
    backend: SandboxBackend,
    task: Task,
    workdir: str = SANDBOX_WORKDIR,
    use_cache: bool = True,
    internet: bool = False,
) -> CheckResult:
    """Run ``task``'s oracle and no-op episodes (or read the cached verdict).

    ``internet`` gives a task that asks for it (``allow_internet``) an open network.
    """
    cache = _cache_dir() / f"{task_hash(task)}{'-net' if internet else ''}.json"
    if use_cache and cache.is_file():
        data = orjson.loads(cache.read_bytes())
        return CheckResult(**{**data, "cached": True})
    result = CheckResult(task.id, ok=False, oracle=None, noop=None)
    try:
        result.oracle = await _score(backend, task, workdir, True, internet)
        result.noop = await _score(backend, task, workdir, False, internet)
    except (VerifierError, SandboxError, OSError) as exc:
        which = "oracle" if result.oracle is None else "no-op"
        result.reason = f"{which} could not run: {exc}"[:500]
        return result  # not cached: a build or an environment may work next time
    else:
        if result.oracle < 1.0:
            result.reason = f"the reference solution scores {result.oracle:g}, not 1"
        elif result.noop >= 1.0:
            result.reason = "doing nothing scores 1: the verifier checks nothing"
        result.ok = not result.reason
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps({k: v for k, v in asdict(result).items() if k != "cached"}))
    tmp.replace(cache)
    return result


async def check_tasks(
    backend: SandboxBackend, tasks: Sequence[Task], workdir: str = SANDBOX_WORKDIR,
    use_cache: bool = True, internet: bool = False, concurrency: int = 4,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:  # fmt: skip
    """:func:`check_task` for each task, ``concurrency`` at a time; results in task order
    (``on_result`` hears of each as it ends).

    Tasks sharing an image build it once (the builder holds one lock per image).
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> CheckResult:
        async with gate:
            result = await check_task(backend, task, workdir, use_cache, internet)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(t) for t in tasks)))
