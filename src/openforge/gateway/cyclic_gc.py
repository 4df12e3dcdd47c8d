"""How a gateway process runs CPython's cyclic GC (docs/gateway.md, "The cyclic GC").

Calls' objects die by reference counting; the collector is only there for rare cycles,
and under load its collections free nothing. What made them costly is what survives them:
the calls in flight and the state of every live rollout, which each young collection moved
to generation 1 and which later collections walked again, for pauses of 150-380 ms at 256
connections that landed in the p99 of whatever calls were in flight. So the survivors of
every collection are frozen (``gc.freeze``: collections skip them) and each object is
walked once, while young.

A frozen object that later becomes part of unreachable cycles (a closed connection's
protocol objects, say) is not freed until it is unfrozen. :func:`reclaim` does that,
with one full collection; the gateway runs it when no call is in flight and the last one
is :data:`RECLAIM_QUIET_S` old, or in any case once it is :data:`RECLAIM_MAX_S` old.
The policy is the whole process's while a gateway runs in it: cyclic garbage of other
work there (an in-process engine's) waits for a reclaim too.
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = [
    "GC_YOUNG_THRESHOLD",
    "RECLAIM_MAX_S",
    "RECLAIM_QUIET_S",
    "install",
    "reclaim",
    "reclaim_due",
    "uninstall",
]

# Young collections run after this many net allocations of tracked objects (CPython's
# default is 700, which at 64 agent calls in flight took 13 % of the gateway's CPU). A
# young collection walks what was made since the last one that is still alive, mostly
# the calls in flight at 256 connections: 10-20 ms at 20,000 (30-80 ms at 100,000).
GC_YOUNG_THRESHOLD = 20_000
RECLAIM_QUIET_S = 60.0
RECLAIM_MAX_S = 600.0

_users = 0
_saved_threshold: tuple[int, int, int] | None = None
_last_reclaim = time.monotonic()


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop":
        gc.freeze()


def install() -> None:
    """Run the collector as above, from now until the matching :func:`uninstall` (the
    gateways of one process share it)."""
    global _users, _saved_threshold, _last_reclaim
    _users += 1
    if _users > 1:
        return
    # Everything loaded so far (tokenizer tables, modules) lives as long as the process.
    gc.collect()
    gc.freeze()
    _saved_threshold = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, _saved_threshold[1], _saved_threshold[2])
    gc.callbacks.append(_freeze_survivors)
    _last_reclaim = time.monotonic()


def uninstall() -> None:
    """Give the collector back its own thresholds once the last gateway stops. What is
    frozen stays frozen, as what the process had loaded before always did: unfreezing
    would make the next gateway's start walk the whole heap."""
    global _users
    _users -= 1
    if _users:
        return
    gc.callbacks.remove(_freeze_survivors)
    if _saved_threshold is not None:
        gc.set_threshold(*_saved_threshold)


def reclaim_due(in_flight: int) -> bool:
    """Whether :func:`reclaim` should run now, with ``in_flight`` calls in flight; True
    once per reclaim due (the caller runs it)."""
    global _last_reclaim
    if not _users:
        return False
    now = time.monotonic()
    age = now - _last_reclaim
    if age >= RECLAIM_MAX_S or (in_flight == 0 and age >= RECLAIM_QUIET_S):
        _last_reclaim = now
        return True
    return False


def reclaim() -> int:
    """Unfreeze everything and run a full collection (its survivors are frozen again);
    returns how many unreachable objects it found."""
    global _last_reclaim
    _last_reclaim = time.monotonic()
    gc.unfreeze()
    return gc.collect()
