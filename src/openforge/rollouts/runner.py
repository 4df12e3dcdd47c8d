"""One rollout, start to finish: mint → sandbox → workspace → harness → verifier → finish.

Failure classes: an infra error (gateway, sandbox, harness setup) is retried up to
``retries`` times, each attempt finished on the gateway as ``infra_error``; a verifier that
crashes or prints garbage is ``infra_error`` at once (rerunning the agent would not fix it);
a harness that runs past the task's timeout is ``timeout``; one that exits non-zero is
``agent_error``. Timeouts and agent errors are still verified: the reward says what the
agent left behind. The task runs as an episode (``tasks/episode.py``): in its own image,
workdir and env when it brings them, one harness launch per step for multi-step tasks.

Every finished attempt is read back: its engine tokens (the run's cost) and the reward-hack
monitor's verdict on its calls and transcript (traces/monitor.py), recorded on the gateway.

A lost gateway is infra too, whatever the harness did: an attempt during whose agent run
the gateway's health check failed (:class:`GatewayWatch`) is not verified, and an attempt
whose finish the gateway did not record is not scored (the store would disagree with
results.jsonl); both are retried. Rollouts whose finish was never recorded are listed in
``RolloutResult.unfinished`` so that a later ``retry_infra`` run can close them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from openforge.environments.base import STATED_ANSWER, UNAVAILABLE_STATUS
from openforge.harnesses.base import (
    ExposesTaskTools,
    Harness,
    HarnessError,
    Launch,
    StatesAnswer,
    TakesMcpServers,
    TakesSkills,
    TakesTurnLimit,
)
from openforge.harnesses.portable import install_for
from openforge.progress import cores, load1
from openforge.rollouts.config import RolloutResult
from openforge.rollouts.cost import usage_from_calls
from openforge.rollouts.gateway_client import GatewayClient, GatewayError, Minted
from openforge.rollouts.gateway_watch import GatewayWatch
from openforge.rollouts.host import mark_overload
from openforge.rollouts.recorded import recorded_transcript
from openforge.sandboxes.base import ModelKey, Sandbox, SandboxBackend, SandboxError
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.tasks.episode import (
    NEEDS_CONTAINER,
    Act,
    Grade,
    Reply,
    Turn,
    TurnOutcome,
    run_episode,
    sandbox_spec,
)
from openforge.tasks.grading import GradeInput, VerifierError, VerifyResult
from openforge.tasks.judge import Judge
from openforge.tasks.model import Task
from openforge.tasks.oracle import verifier_runs_untouched
from openforge.tasks.transcript import Transcript
from openforge.tasks.verify import run_verifier
from openforge.traces.monitor import CallContent, RuleSet, scan

__all__ = ["Attempt", "RolloutJob", "add_skills", "run_job"]

log = logging.getLogger("openforge.rollouts")

_LOG_TAIL = 64 * 1024
_INFRA = (SandboxError, GatewayError, HarnessError, OSError)


@dataclass(slots=True)
class RolloutJob:
    """What :func:`run_job` needs besides the task."""

    harness: Harness
    backend: SandboxBackend
    gateway: GatewayClient
    watch: GatewayWatch
    group_id: str
    model: str
    workdir: str
    retries: int
    retry_backoff_s: float
    metadata: dict[str, Any]
    allow_internet: bool = False  # honour tasks' allow_internet (else gateway-only)
    # The roles besides the policy the gateway has engines for ("judge", "user").
    serving_roles: frozenset[str] = frozenset()
    # The reward-hack monitor's rules, run on each finished attempt (None: no monitor).
    monitor: RuleSet | None = None
    run_id: str | None = None  # the orchestrator run, recorded with each rollout


@dataclass(slots=True)
class Attempt:
    """The logs an attempt produced (written to the run dir by the orchestrator)."""

    agent_log: bytes = b""
    transcript: Transcript | None = None  # the harness's own (its raw form goes to the run dir)
    timings: dict[str, float] = field(default_factory=dict)


class _Infra(Exception):
    """An attempt failed for infrastructure reasons; retryable."""


def _model_origin(minted: Minted) -> str:
    """The gateway's model listener, as the mint answered it: the only place a sandbox may
    reach (the admin listener the orchestrator talks to is never given to a sandbox)."""
    parts = urlsplit(minted.base_url)
    return f"{parts.scheme}://{parts.netloc}"


def _sandbox_base_url(minted: Minted, sandbox: Sandbox) -> str:
    root = (sandbox.gateway_url or _model_origin(minted)).rstrip("/")
    return root + urlsplit(minted.base_url).path


async def add_skills(box: Sandbox, source: str, harness: Harness) -> None:
    """Copy every skill directory of ``source`` (the task's ``skills_dir``) into the
    harness's own skills directory, as Harbor does; a harness that loads no skills gets none
    (Harbor's agents without skills get none either)."""
    if not isinstance(harness, TakesSkills):
        return
    src, dst = shlex.quote(source.rstrip("/")), shlex.quote(harness.skills_home)
    script = (
        f"[ -d {src} ] || {{ echo 'skills_dir '{src}' is not a directory of the image'; exit 3; }}"
        f'; mkdir -p {dst} && for d in {src}/*/; do [ -d "$d" ] && cp -R "$d" {dst}/; done; true'
    )
    res = await box.exec(["sh", "-c", script], timeout=60)
    if res.exit_code != 0:
        raise HarnessError((res.stdout + res.stderr).decode(errors="replace").strip()[-500:])


async def _setup(task: Task, job: RolloutJob, box: Sandbox, minted: Minted) -> None:
    if task.sidecars is not None:
        await task.sidecars.prepare(box)
    await job.harness.check(box)
    await job.harness.configure(box, _sandbox_base_url(minted, box), minted.key, job.model)
    if task.tools and isinstance(job.harness, ExposesTaskTools):
        await job.harness.add_tools(box, task.tools)
    if task.environment is not None and task.environment.skills_dir is not None:
        await add_skills(box, task.environment.skills_dir, job.harness)
    if task.mcp is not None:
        if not isinstance(job.harness, TakesMcpServers):
            raise HarnessError(f"{job.harness.name} cannot take the task's MCP tools")
        await job.harness.add_mcp_server(box, task.mcp)


def _launch(task: Task, harness: Harness, turn: Turn) -> Launch:
    """The harness's launch for ``turn``: capped at the task's ``max_turns`` model calls and
    continuing the session for a simulated user's message, where the harness can."""
    if isinstance(harness, TakesTurnLimit):
        return harness.turn_command(turn.instruction, task.max_turns, turn.resume)
    if turn.resume:  # checked before the attempt (_cannot_run); kept for direct callers
        raise HarnessError(f"{harness.name} cannot continue a conversation")
    return harness.command(turn.instruction)


def _cannot_run(task: Task, job: RolloutJob, minted: Minted) -> str | None:
    """Why an attempt of ``task`` cannot run at all (the same for every retry)."""
    if task.environment is not None and job.backend.name == "local":
        return NEEDS_CONTAINER
    if task.needs_internet and not job.allow_internet:
        return (
            f"the task needs the internet ({task.needs_internet}); run with "
            "--allow-task-internet where its sandbox can reach it"
        )
    calling = _model_sidecars(task)
    if calling and "user" not in minted.role_keys:
        return (
            f"the task's sidecar {calling[0]} calls a model (a simulated user): start the "
            "gateway with --user-engine (or --judge-engine) to answer it"
        )
    if task.simulated_user is not None:
        if not isinstance(job.harness, TakesTurnLimit):
            return (
                f"a multi-turn task needs a harness that can continue its conversation "
                f"(claw, claude-code); {job.harness.name} cannot"
            )
        if "user" not in minted.role_keys:
            return (
                "a multi-turn task needs a simulated user: start the gateway with "
                "--judge-engine (or --user-engine)"
            )
    return None


def _harness_act(
    task: Task, job: RolloutJob, box: Sandbox, minted: Minted, out: Attempt, workdir: str
) -> Act:
    """The agent turn: the harness, set up on the first turn (after the workspace is in
    place), launched on each turn's instruction."""
    env = task.environment.env if task.environment else {}
    ready: list[bool] = []
    started = time.monotonic()

    async def act(turn: Turn) -> TurnOutcome:
        t0 = time.perf_counter()
        try:
            if not ready:
                await _setup(task, job, box, minted)
                if task.gui is not None:
                    await task.gui.prepare(box, SANDBOX_HOME)
                ready.append(True)
                out.timings["setup"] = time.perf_counter() - t0
            launch = _launch(task, job.harness, turn)
            # A task's sidecars (services) run around the harness, in its process tree.
            argv = task.sidecars.wrap(launch.argv) if task.sidecars else launch.argv
            if task.gui is not None:
                # The GUI environment lives in the harness's exec: it ends when the harness
                # does (finished, timed out or cancelled).
                argv = task.gui.wrap_argv(argv, SANDBOX_HOME)
        except _INFRA as exc:
            raise _Infra(f"{type(exc).__name__}: {exc}") from exc
        t1 = time.perf_counter()
        try:
            res = await box.exec(
                argv,
                env={**env, **launch.env},
                cwd=launch.cwd if task.workdir is None else workdir,
                timeout=turn.timeout_s,
                stdin=launch.stdin,
            )
        except _INFRA as exc:
            raise _Infra(f"{type(exc).__name__}: {exc}") from exc
        out.timings["agent"] = out.timings.get("agent", 0.0) + time.perf_counter() - t1
        out.agent_log += res.stdout[-_LOG_TAIL:] + (
            b"\n--- stderr ---\n" + res.stderr[-_LOG_TAIL:] if res.stderr else b""
        )
        lost = await job.watch.lost_since(started)
        if lost is not None:
            # What the harness did without its model is not the model's doing: not verified.
            raise _Infra(lost)
        if task.gui is not None and res.exit_code == UNAVAILABLE_STATUS and not res.timed_out:
            # The wrapper's own status: its environment never came up, so no harness ran. Told
            # here, from the exec's status (no harness can end with it), not from files the
            # agent could delete: a GUI verifier then reads a missing result as the agent's 0.
            tail = res.stderr.decode(errors="replace").strip().splitlines()[-4:]
            raise _Infra("the GUI environment did not start: " + " | ".join(tail))
        if res.timed_out:
            return TurnOutcome(
                "timeout", None, f"harness ran past the task timeout ({turn.timeout_s:g}s)"
            )
        if res.exit_code != 0:
            return TurnOutcome(
                "agent_error", res.exit_code, f"harness exited with status {res.exit_code}"
            )
        return TurnOutcome()

    return act


def _model_sidecars(task: Task) -> list[str]:
    """The names of ``task``'s sidecars that call a model (Harbor's simulated users)."""
    services = task.environment.services if task.environment else ()
    return [svc.name for svc in services if svc.model_apis]


def wanted_roles(task: Task) -> list[str]:
    """The role keys a rollout of ``task`` asks for: a judge for a suite's grader and a
    simulated user for a multi-turn task or a sidecar that calls a model."""
    user = task.simulated_user is not None or bool(_model_sidecars(task))
    return (["judge"] if task.grader is not None else []) + (["user"] if user else [])


def task_roles(task: Task, serving: frozenset[str]) -> list[str]:
    """The role keys to mint with a rollout of ``task``: those it asks for that the
    gateway serves."""
    return [role for role in wanted_roles(task) if role in serving]


def _service_key(minted: Minted) -> ModelKey | None:
    """The rollout's user-role key as its sidecars call a model with it (paths only: the
    backend joins them to the gateway's address inside the sandbox)."""
    key = minted.role_keys.get("user")
    if key is None:
        return None
    return ModelKey(
        key.key, urlsplit(key.openai_base_url).path, urlsplit(key.anthropic_base_url).path
    )


def role_endpoint(minted: Minted, role: str) -> Judge | None:
    """The endpoint of the rollout's ``role`` key (its calls recorded under the rollout)."""
    key = minted.role_keys.get(role)
    return None if key is None else Judge(key.openai_base_url, key.key, key.model)


async def _recorded(job: RolloutJob, minted: Minted) -> Transcript | None:
    """The rollout's transcript from the gateway's record of its calls, never from the
    harness's files in the sandbox (which the agent can rewrite); its final answer, where the
    harness states one, read by the adapter from the policy's last recorded reply."""
    calls = await job.gateway.calls(minted.rollout_id, content=True)
    stated = job.harness.stated_answer if isinstance(job.harness, StatesAnswer) else None
    return recorded_transcript(calls, stated)


def _suite_grade(
    task: Task, job: RolloutJob, box: Sandbox, out: Attempt, workdir: str, minted: Minted
) -> Grade | None:
    """A published suite's own grader, given the rollout's transcript as the gateway recorded
    it and the rollout's judge."""
    grader = task.grader
    if grader is None:
        return None

    async def grade() -> VerifyResult:
        with contextlib.suppress(*_INFRA):
            out.transcript = await job.harness.collect(box)  # kept with the run's logs
        transcript = await _recorded(job, minted)
        judge = role_endpoint(minted, "judge")
        return await grader.grade(GradeInput(box, workdir, transcript, judge))

    return grade


def _stated_verify(
    task: Task, job: RolloutJob, box: Sandbox, workdir: str, minted: Minted
) -> Grade | None:
    """A GUI task's verifier, given the final answer the policy stated as the gateway
    recorded it (:data:`STATED_ANSWER`; null when it stated none or its harness states none),
    so that no file the agent could write in the sandbox is taken for its answer."""
    if task.grader is not None or task.gui is None or task.steps:
        return None

    async def grade() -> VerifyResult:
        transcript = await _recorded(job, minted)
        answer = transcript.answer if transcript is not None else None
        given = {STATED_ANSWER: orjson.dumps({"answer": answer})}
        return await run_verifier(box, task, workdir, given=given)

    return grade


def _user_reply(task: Task, job: RolloutJob, minted: Minted) -> Reply | None:
    """A multi-turn task's simulated user, asked through the rollout's user-role key with
    the conversation so far as the gateway recorded it."""
    user = task.simulated_user
    if user is None:
        return None
    endpoint = role_endpoint(minted, "user")

    async def reply() -> str | None:
        return await user.reply(await _recorded(job, minted), endpoint)

    return reply


async def _attempt(
    task: Task, job: RolloutJob, minted: Minted, out: Attempt, result: RolloutResult
) -> None:
    """Run one attempt in its own sandbox; fill ``result``; raise :class:`_Infra`."""
    why = _cannot_run(task, job, minted)
    if why is not None:
        result.status, result.error = "infra_error", why
        result.verifier_output = ""  # not retried: every attempt would end the same way
        return
    spec = sandbox_spec(task, job.workdir, _model_origin(minted), job.allow_internet)
    spec.labels = {"openforge/rollout": minted.rollout_id, "openforge/group": job.group_id}
    spec.service_key = _service_key(minted)
    workdir = spec.workdir
    t0 = time.perf_counter()
    try:
        # Container and pod sandboxes lack the host's harness install: show a portable one.
        if job.backend.name != "local":
            spec.harness = await install_for(job.harness)
        box = await job.backend.create(spec)
    except _INFRA as exc:
        raise _Infra(f"sandbox create: {exc}") from exc
    out.timings["create"] = time.perf_counter() - t0
    try:
        act = _harness_act(task, job, box, minted, out, workdir)
        try:
            grade = _suite_grade(task, job, box, out, workdir, minted) or _stated_verify(
                task, job, box, workdir, minted
            )
            reply = _user_reply(task, job, minted)
            episode = await run_episode(box, task, workdir, act, grade, reply)
        except VerifierError as exc:
            result.verifier_output = exc.output
            if not await _agent_broke_it(task, job, exc):
                result.status, result.error = "infra_error", f"verifier: {exc}"
                return
            outcome = exc.outcome if isinstance(exc.outcome, TurnOutcome) else TurnOutcome()
            result.status, result.agent_exit_code = outcome.status, outcome.exit_code
            result.error = f"{outcome.error}; " if outcome.error else ""
            result.error += f"the agent broke the verifier (it runs untouched): {exc}"
            result.reward, result.details = 0.0, {"verifier_failed": str(exc)}
            with contextlib.suppress(*_INFRA):
                out.transcript = await job.harness.collect(box)
            return
        except _INFRA as exc:
            raise _Infra(f"{type(exc).__name__}: {exc}") from exc
        status, code, error = (
            episode.outcome.status,
            episode.outcome.exit_code,
            episode.outcome.error,
        )
        if out.transcript is None:  # a suite's grader has collected it already
            with contextlib.suppress(*_INFRA):
                out.transcript = await job.harness.collect(box)
        if status == "agent_error" and out.transcript is not None and out.transcript.error:
            error = f"{error}: {out.transcript.error}"
        result.status, result.agent_exit_code, result.error = status, code, error
        result.reward, result.details = episode.reward, episode.details
        result.verifier_output = episode.output or None
        out.timings["verify"] = episode.verify_s
    finally:
        t2 = time.perf_counter()
        await asyncio.shield(box.close())
        out.timings["teardown"] = time.perf_counter() - t2


async def _agent_broke_it(task: Task, job: RolloutJob, exc: VerifierError) -> bool:
    """Whether a verifier failure is the agent's doing: it failed where the agent had its
    hands, and the same verifier gives a reward where no agent was (:class:`_Infra` when
    that check cannot run)."""
    if not exc.agent_reachable:
        return False
    try:
        return await verifier_runs_untouched(job.backend, task, job.workdir)
    except _INFRA as exc2:
        raise _Infra(f"verifier failed ({exc}); checking it untouched: {exc2}") from exc2


async def _finish(job: RolloutJob, rollout_id: str, result: RolloutResult) -> bool:
    """Finish the rollout on the gateway; False (and ``result`` made infra) if not recorded."""
    details: dict[str, Any] = {"error": result.error, "attempt": result.attempts}
    if result.details is not None:
        details["verifier"] = result.details
    try:
        await job.gateway.finish(rollout_id, result.status, result.reward, details)
    except GatewayError as exc:
        result.finish_error = str(exc)
        result.unfinished.append(rollout_id)
        if result.status != "infra_error":
            # The store does not hold this outcome: scoring it would train on a reward
            # the recorded calls do not carry (or on a 0 the lost gateway caused).
            was = f"{result.status}, reward {result.reward}"
            result.status, result.error = "infra_error", f"finish not recorded ({was}): {exc}"
        return False
    return True


async def _read_back(
    job: RolloutJob, rollout_id: str, result: RolloutResult, transcript: Transcript | None
) -> None:
    """Once the attempt is finished (its calls all in): add its engine tokens by role to
    ``result.usage`` (what the run cost), and run the reward-hack monitor over its calls
    and transcript, recording the flags on the gateway. A gateway that cannot list the
    calls leaves the count short and the rollout unchecked, never fails it."""
    try:
        calls = await job.gateway.calls(rollout_id, content=job.monitor is not None)
    except GatewayError as exc:
        if job.monitor is not None:
            log.warning("rollout %s: not checked by the monitor: %s", rollout_id, exc)
        return
    result.host["engine_queue_s"] = round(sum(float(c.get("queued_s") or 0) for c in calls), 3)
    for role, counts in usage_from_calls(calls).items():
        mine = result.usage.setdefault(role, {"calls": 0, "prompt": 0, "output": 0})
        for key, value in counts.items():
            mine[key] = mine.get(key, 0) + value
    if job.monitor is None:
        return
    flags = scan(job.monitor, [CallContent.from_json(c) for c in calls], transcript)
    result.flags = [f.rule for f in flags]
    if flags:
        try:
            await job.gateway.flag(rollout_id, flags)
        except GatewayError as exc:
            log.warning("rollout %s: flags %s not recorded: %s", rollout_id, result.flags, exc)


async def run_job(task: Task, sample: int, job: RolloutJob) -> tuple[RolloutResult, Attempt]:
    """Run one (task, sample) rollout with bounded infra retries."""
    result = RolloutResult(
        task_id=task.id,
        sample=sample,
        status="infra_error",
        group_id=job.group_id,
        split=task.split,
        started_at=time.time(),
    )
    result.host = {"cores": float(cores()), "load_start": load1()}
    out = Attempt()
    t_start = time.perf_counter()
    for attempt in range(1, job.retries + 2):
        result.attempts, out = attempt, Attempt()
        result.status, result.error, result.reward = "infra_error", None, None
        result.details = result.verifier_output = result.agent_exit_code = None
        result.finish_error = None
        meta = {**job.metadata, "task_id": task.id, "sample": sample, "attempt": attempt}
        try:
            roles = task_roles(task, job.serving_roles)
            minted = await job.gateway.mint(
                task.id, job.group_id, meta, roles, run_id=job.run_id, split=task.split
            )
        except GatewayError as exc:
            result.error = f"gateway mint: {exc}"
        else:
            result.rollout_id = minted.rollout_id
            try:
                await _attempt(task, job, minted, out, result)
            except _Infra as exc:
                result.error = str(exc)
            except Exception as exc:  # an adapter's bug must not end the whole run
                result.error = f"internal: {type(exc).__name__}: {exc}"
            except asyncio.CancelledError:
                result.error = "interrupted"
                await asyncio.shield(_finish(job, minted.rollout_id, result))
                raise
            # A verifier that crashed is not retried: rerunning the agent would not fix it.
            final = result.status != "infra_error" or result.verifier_output is not None
            finished = await _finish(job, minted.rollout_id, result)
            result.flags = []
            await _read_back(job, minted.rollout_id, result, out.transcript)
            if finished and final:
                break
        if attempt <= job.retries:
            await asyncio.sleep(job.retry_backoff_s * attempt)
    result.finished_at = time.time()
    out.timings["total"] = time.perf_counter() - t_start
    result.timings = {k: round(v, 6) for k, v in out.timings.items()}
    if result.status == "infra_error":
        result.reward = None
    result.host["load_end"] = load1()
    mark_overload(result)
    return result, out
