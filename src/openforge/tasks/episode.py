"""One task's episode in one sandbox: workspace, healthcheck, each step's agent turn and verdict.

The agent is a callback (:data:`Act`): the orchestrator's harness, the oracle (the task's
reference solution) or a no-op, so a rollout and ``openforge tasks check`` run a task the
same way. A single-step task is one turn and one verdict; a multi-step task (Harbor
``[[steps]]``) puts each step's ``workdir/`` files in place, runs its ``setup.sh``, runs the
agent on the step's instruction, verifies the step, stops early when ``min_reward`` is not
met (or the agent failed), and rolls the step rewards up as the task says (``mean`` of the
steps that ran, or the ``final`` one's).

A multi-turn task (``Task.simulated_user``) is one conversation, driven as ClawEval's runner
drives it: after each agent turn that completes (its harness stops calling tools), the
simulated user is asked for its next message (:data:`Reply`); ``None`` (satisfied) or
``max_rounds`` replies end it, and each reply is a further agent turn that continues the same
session (``Turn.resume``) within what is left of the task's timeout. Then the task is graded
once, on the whole conversation.

Each step's healthcheck (``TaskStep.healthcheck``) is polled after its files and
``setup.sh`` are in place and before its agent starts. Exceptions: the task's healthcheck,
or the first step's ``setup.sh`` or healthcheck, failing is a :class:`VerifierError`-like
:class:`EnvironmentFailed` (the rollout's ``infra_error``): no agent has run yet. A later
step's failing the same way follows an agent's turn in the same environment, so it is the
agent's doing: that step scores 0 and the episode ends (an agent cannot turn its failure
into ``infra_error``). Verifier failures are :class:`~openforge.tasks.grading.VerifierError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforge.sandboxes.base import KillsLeftovers, Sandbox, SandboxSpec, TaskImage
from openforge.tasks.grading import VerifierError, VerifyResult
from openforge.tasks.model import Healthcheck, Task, TaskStep
from openforge.tasks.verify import run_verifier

__all__ = [
    "Act",
    "EnvironmentFailed",
    "Episode",
    "Grade",
    "Reply",
    "Turn",
    "TurnOutcome",
    "run_episode",
    "sandbox_spec",
    "task_image",
]


NEEDS_CONTAINER = (
    "the task brings its own environment (image, /tests): run it on a container backend "
    "(--backend podman); the local backend has none"
)


class EnvironmentFailed(VerifierError):
    """The task's environment did not come up (healthcheck, a step's setup.sh)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """What one agent turn is asked to do (the whole task, or one step)."""

    instruction: str
    timeout_s: float
    solution: dict[str, Path]  # the reference solution for this turn (the oracle runs it)
    step: TaskStep | None = None
    # A multi-turn task's later turn: continue the harness's session with ``instruction``
    # (the simulated user's message) instead of starting a new one.
    resume: bool = False


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How the agent's turn ended: ``completed``, ``agent_error`` or ``timeout``."""

    status: str = "completed"
    exit_code: int | None = 0
    error: str | None = None


Act = Callable[[Turn], Awaitable[TurnOutcome]]
# A published suite's own grader (``Task.grader``), run instead of the task's verifier.
Grade = Callable[[], Awaitable[VerifyResult]]
# A multi-turn task's simulated user: its next message after the agent's turn, None when
# satisfied (raises VerifierError when it cannot answer).
Reply = Callable[[], Awaitable[str | None]]


@dataclass(slots=True)
class Episode:
    """The agent's last outcome and the task's reward (per-step verdicts in ``details``)."""

    outcome: TurnOutcome
    reward: float
    details: Any = None
    output: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    verify_s: float = 0.0  # seconds spent in verifiers


def task_image(task: Task) -> TaskImage | None:
    """The image a task's own environment builds to (None when it brings none)."""
    e = task.environment
    if e is None:
        return None
    return TaskImage(
        context=None if e.context is None else str(e.context),
        dockerfile=None if e.dockerfile is None else str(e.dockerfile),
        image=e.image,
        build_timeout_s=e.build_timeout_s,
        exclude=e.hidden,
    )


def sandbox_spec(
    task: Task, workdir: str, gateway_url: str | None = None, internet: bool = False
) -> SandboxSpec:
    """The sandbox a task asks for: its own image, workdir, env and limits, and what its GUI
    environment needs (an image with a browser and a display; the host paths a local sandbox
    must show)."""
    image = task_image(task)
    network = task.network
    if task.wants_internet and internet:
        network = "open"
    return SandboxSpec(
        image=task.image,
        task_image=image,
        workdir=task.workdir or workdir,
        env=dict(task.environment.env) if task.environment else {},
        cpu=task.cpu,
        memory_mb=task.memory_mb,
        pids=task.pids,
        disk_mb=task.disk_mb,
        network=network,
        gateway_url=gateway_url,
        lifetime_s=task.timeout_s + task.verify_timeout_s + 60,
        host_paths=task.gui.host_paths() if task.gui is not None else (),
        gui=task.gui is not None,
        services=task.environment.services if task.environment else (),
    )


async def _poll(box: Sandbox, check: Healthcheck, workdir: str, env: dict[str, str]) -> str | None:
    """Poll ``check`` as Docker's HEALTHCHECK does; None once it passes, else the last
    try's output after ``retries`` consecutive failures past the start period."""
    start = time.monotonic()
    failures = 0
    while True:
        res = await box.exec(
            ["sh", "-c", check.command], env=env, cwd=workdir, timeout=check.timeout_s
        )
        if res.exit_code == 0 and not res.timed_out:
            return None
        starting = time.monotonic() - start < check.start_period_s
        if not starting:
            failures += 1
            if failures >= check.retries:
                why = "timed out" if res.timed_out else f"exit {res.exit_code}"
                return f"{why}: " + (res.stdout + res.stderr).decode(errors="replace")[-2000:]
        await asyncio.sleep(check.start_interval_s if starting else check.interval_s)


async def _healthcheck(box: Sandbox, task: Task, workdir: str) -> None:
    check = task.environment.healthcheck if task.environment else None
    if check is None:
        return
    env = dict(task.environment.env) if task.environment else {}
    last = await _poll(box, check, workdir, env)
    if last is not None:
        raise EnvironmentFailed(
            f"healthcheck failed ({check.retries} tries): {check.command}", last
        )


async def _step_ready(
    box: Sandbox, step: TaskStep, workdir: str, env: dict[str, str]
) -> tuple[str, str] | None:
    """Put the step's files in place, run its ``setup.sh`` and poll its healthcheck; None
    when the step may start, else why not and the output that shows it."""
    await box.put({rel: p.read_bytes() for rel, p in step.files.items()})
    if "setup.sh" in step.files:
        res = await box.exec(["bash", "setup.sh"], cwd=workdir, env=env, timeout=600)
        if res.exit_code != 0:
            out = (res.stdout + res.stderr).decode(errors="replace")[-2000:]
            return f"step {step.name}: setup.sh exited {res.exit_code}", out
    if step.healthcheck is not None:
        last = await _poll(box, step.healthcheck, workdir, env)
        if last is not None:
            check = step.healthcheck
            return (
                f"step {step.name}: healthcheck failed ({check.retries} tries): {check.command}",
                last,
            )
    return None


async def _mark(box: Sandbox) -> None:
    if isinstance(box, KillsLeftovers):
        await box.mark_processes()


async def _end_leftovers(box: Sandbox) -> None:
    """Kill what the agent left running (a background writer of the reward file, a process
    waiting to edit the verifier's files), so the verifier runs alone."""
    if isinstance(box, KillsLeftovers):
        await box.kill_leftovers()


def _gate(step: TaskStep, verdict: VerifyResult) -> bool:
    """True when the episode may go on after ``step``."""
    if step.min_reward is None:
        return True
    if isinstance(step.min_reward, float):
        return verdict.reward >= step.min_reward
    rewards = verdict.details.get("rewards", {}) if isinstance(verdict.details, dict) else {}
    return all(rewards.get(k, float("-inf")) >= v for k, v in step.min_reward.items())


async def _converse(task: Task, act: Act, reply: Reply | None) -> TurnOutcome:
    """The task's agent turns: one, or a conversation with its simulated user."""
    deadline = time.monotonic() + task.timeout_s
    outcome = await act(Turn(task.instruction, task.timeout_s, task.solution))
    user = task.simulated_user
    if user is None or reply is None:
        return outcome
    rounds = 0
    while outcome.status == "completed" and rounds < user.max_rounds:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        message = await reply()
        if message is None:  # the user is satisfied
            break
        rounds += 1
        left = deadline - time.monotonic()
        if left <= 0:
            break
        outcome = await act(Turn(message, left, {}, resume=True))
    return outcome


async def run_episode(
    box: Sandbox,
    task: Task,
    workdir: str,
    act: Act,
    grade: Grade | None = None,
    reply: Reply | None = None,
) -> Episode:
    """Run ``task`` in ``box`` with ``act`` as the agent (and ``reply`` as a multi-turn
    task's user); verify (or ``grade``); return the reward."""
    await box.put(task.workspace_bytes())
    await _healthcheck(box, task, workdir)
    if not task.steps:
        await _mark(box)
        outcome = await _converse(task, act, reply)
        await _end_leftovers(box)
        t0 = time.perf_counter()
        try:
            verdict = await (grade() if grade is not None else run_verifier(box, task, workdir))
        except VerifierError as exc:
            exc.outcome = outcome
            raise
        return Episode(
            outcome, verdict.reward, verdict.details, verdict.output,
            verify_s=time.perf_counter() - t0,
        )  # fmt: skip
    env = task.environment.env if task.environment else {}
    ran: list[dict[str, Any]] = []
    outcome = TurnOutcome()
    output = ""
    verify_s = 0.0
    for i, step in enumerate(task.steps):
        failed = await _step_ready(box, step, workdir, env)
        if failed is not None and i == 0:
            # No agent has run in this environment yet: it did not come up.
            raise EnvironmentFailed(*failed)
        if failed is not None:
            # What an earlier step's agent left behind fails this step's precondition: the
            # agent's doing (never infra_error), so the step scores 0 and the episode ends.
            why, out = failed
            ran.append({"step": step.name, "reward": 0.0, "details": {"not_started": why}})
            output += f"--- step {step.name} ---\n{why}\n{out}\n"
            break
        await _mark(box)
        outcome = await act(Turn(step.instruction, step.timeout_s, step.solution, step))
        await _end_leftovers(box)
        t0 = time.perf_counter()
        try:
            verdict = await run_verifier(box, task, workdir, step)
        except VerifierError as exc:
            exc.outcome = outcome
            raise
        verify_s += time.perf_counter() - t0
        ran.append({"step": step.name, "reward": verdict.reward, "details": verdict.details})
        output += f"--- step {step.name} ---\n{verdict.output}\n"
        if outcome.status != "completed" or not _gate(step, verdict):
            break
    rewards = [s["reward"] for s in ran]
    reward = rewards[-1] if task.step_reward == "final" else sum(rewards) / len(rewards)
    details = {"steps": ran, "strategy": task.step_reward}
    return Episode(outcome, reward, details, output[-8000:], ran, verify_s)
