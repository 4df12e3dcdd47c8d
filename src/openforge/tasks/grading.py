"""What a task's grading produces and the graders a task can carry, in one leaf module.

Verifiers (:mod:`openforge.tasks.verify`), published suites' graders (``openforge.suites``)
and the episode all speak these types; :class:`~openforge.tasks.model.Task` holds a grader
and a simulated user without knowing how verification runs.

Exceptions::

    VerifierError      the verifier or grader could not give a reward (``infra_error``, or 0
                       when the agent's leftovers are shown to have broken it)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from openforge.sandboxes.base import Sandbox
from openforge.tasks.judge import Judge
from openforge.tasks.transcript import Transcript

__all__ = ["GradeInput", "SimulatedUser", "SuiteGrader", "VerifierError", "VerifyResult"]


class VerifierError(Exception):
    """The verifier crashed, timed out or printed no valid reward line.

    ``agent_reachable``: it failed where the agent had its hands (the agent's own
    environment, files it could have planted or removed, processes it could have started),
    so the failure alone does not show that the verifier is broken. The rollout runs the
    verifier again where no agent was (:func:`openforge.tasks.oracle.verifier_runs_untouched`):
    if it runs there, the agent broke it and the reward is 0; only otherwise is the rollout
    ``infra_error``. An agent cannot turn its failure into a masked ``infra_error``.
    """

    def __init__(self, message: str, output: str = "", agent_reachable: bool = False) -> None:
        super().__init__(message)
        self.output = output
        self.agent_reachable = agent_reachable
        # The agent turn's TurnOutcome (tasks/episode.py), when the verifier ran after one.
        self.outcome: Any = None


@dataclass(slots=True)
class VerifyResult:
    """A reward in [0, 1] and what the verifier or grader said about it."""

    reward: float
    details: Any = None
    output: str = ""  # stdout + stderr tail, for debugging
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GradeInput:
    """What a suite's grader is given once the agent stops: the sandbox it left, its workdir
    there, the rollout's transcript (as the gateway recorded the calls; None when there were
    none) and the run's LLM judge (None when the run has none)."""

    sandbox: Sandbox
    workdir: str
    transcript: Transcript | None
    judge: Judge | None = None


class SuiteGrader(Protocol):
    """A published suite's own grader, run on the host after the agent stops.

    Published suites grade outside the agent's box (ClawEval grades its trace on the host,
    QwenClawBench copies the workspace out and grades the copy), and they grade the
    transcript as well as the files, so they cannot be a ``verify_command``. A grader that
    cannot run raises :class:`VerifierError` (an ``infra_error``).
    ``given.judge`` is the LLM judge the run provides (a judge-role key on the gateway, see
    :mod:`openforge.tasks.judge`), None when it has none; a grader that needs one falls back
    to :func:`openforge.tasks.judge.resolve_judge` and fails (never scores) without.
    """

    async def grade(self, given: GradeInput) -> VerifyResult:
        """Grade what the agent left in ``given.sandbox`` and its ``given.transcript``."""
        ...


class SimulatedUser(Protocol):
    """The simulated user of a multi-turn task (ClawEval's ``user_agent``).

    After each agent turn that ends without a tool call the user is asked for its next
    message, through the run's user-role endpoint (a user-role key on the gateway: its calls
    are recorded under the rollout with role ``user`` and never trained on); ``None`` means
    the user is satisfied. At most ``max_rounds`` replies are asked for. A user that cannot
    answer (its engine failed) raises :class:`VerifierError`: the
    rollout's ``infra_error``, never a score.
    """

    @property
    def max_rounds(self) -> int:
        """How many replies the user gives at most."""
        ...

    async def reply(self, transcript: Transcript | None, endpoint: Judge | None) -> str | None:
        """The user's next message as the agent receives it, or None when satisfied."""
        ...
