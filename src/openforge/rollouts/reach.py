"""Refuse, before any rollout, a harness that could write the reward evidence of its tasks.

A GUI task's reward is read from state its environment keeps in the sandbox (the browser
environment's result file, the web apps' database): a harness whose model acts only through
the environment's actions (:class:`~openforge.harnesses.base.ConfinedToGui`: the built-in
browser agent, Browser-Use) cannot write it, but one with a shell (claw, Claude Code,
Codex, …) runs as the same uid in the same sandbox and can — a policy trained there learns
to write its own reward. Such a run is refused with the reason unless the user says
otherwise (``RolloutConfig.allow_reachable_evidence``, ``--allow-reachable-evidence``).
"""

from __future__ import annotations

from collections.abc import Sequence

from openforge.harnesses.base import ConfinedToGui, Harness, HarnessError
from openforge.tasks.model import Task

__all__ = ["EvidenceReachable", "refuse_reachable_evidence"]

_SHOWN = 3  # task ids named in the message


class EvidenceReachable(HarnessError):
    """The harness could write the reward evidence of some of the run's tasks."""


def refuse_reachable_evidence(tasks: Sequence[Task], harness: Harness) -> None:
    """Raise :class:`EvidenceReachable` when ``harness`` is not confined to the GUI and
    some of ``tasks`` keep their reward evidence in the sandbox."""
    if isinstance(harness, ConfinedToGui) and harness.gui_only:
        return
    exposed = [(t, t.gui.evidence_in_sandbox()) for t in tasks if t.gui is not None]
    exposed = [(t, what) for t, what in exposed if what]
    if not exposed:
        return
    names = ", ".join(t.id for t, _ in exposed[:_SHOWN])
    more = f" and {len(exposed) - _SHOWN} more" if len(exposed) > _SHOWN else ""
    raise EvidenceReachable(
        f"harness {harness.name} can run commands in the sandbox, and {len(exposed)} task(s) "
        f"({names}{more}) read their reward from {exposed[0][1]} there: it could write its "
        "own reward. Run them with a GUI harness (browser-agent, browser-use), or pass "
        "--allow-reachable-evidence (RolloutConfig.allow_reachable_evidence) to run it anyway"
    )
