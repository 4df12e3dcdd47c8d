"""Whether the machine was overloaded while a rollout ran: its load average per core (from
``openforge.progress``) and the time the rollout waited for the engine. A rollout that timed
out on an overloaded host carries that evidence, so the machine's slowness is told apart
from an agent that ran long. Its status stays ``timeout``: an agent could load the host
itself, and must not be able to turn its own failure into a masked ``infra_error``."""

from __future__ import annotations

from openforge.rollouts.config import RolloutResult

__all__ = ["OVERLOADED_LOAD", "mark_overload"]

# Load average per core above which the host counts as overloaded: runnable work waits.
OVERLOADED_LOAD = 1.5
# Share of the agent's time spent waiting for the engine above which it counts too.
_ENGINE_QUEUE_SHARE = 0.25


def mark_overload(result: RolloutResult) -> None:
    """Say in ``result.host`` (``overloaded`` 1.0 or 0.0) and, for a timeout, in its error
    whether the host was overloaded while it ran."""
    host = result.host
    n = max(host.get("cores", 1.0), 1.0)
    load = max(host.get("load_start", 0.0), host.get("load_end", 0.0))
    queued = host.get("engine_queue_s", 0.0)
    agent = result.timings.get("agent", 0.0)
    overloaded = load / n >= OVERLOADED_LOAD or (
        agent > 0 and queued / agent >= _ENGINE_QUEUE_SHARE
    )
    host["overloaded"] = 1.0 if overloaded else 0.0
    if overloaded and result.status == "timeout":
        note = (
            f"the host was overloaded (load {load:g} on {n:g} cores, {queued:.0f} s waiting "
            "for the engine): lower --concurrency"
        )
        result.error = f"{result.error}; {note}" if result.error else note
