"""Is the gateway still there? A run-wide health watch that rollouts ask about their window.

A harness that loses the gateway mid-run sees refused calls and usually exits non-zero or
gives up; its verifier then scores what little it left: a 0 the model did not earn. The
orchestrator cannot see the harness's connection errors (they happen inside the sandbox),
so it watches the gateway itself: one task per run probes ``GET /health`` every
``interval_s`` and remembers the last failure. A rollout notes when its agent started and,
when the agent ends, asks :meth:`GatewayWatch.lost_since`, which probes once more (so a
gateway that died a moment ago is not missed between polls) and reports any failure seen
since then. Such a rollout is an infrastructure failure, never scored.

What it cannot see: a gateway that died and came back between two probes (faster than
``interval_s``); the finish of such a rollout still succeeds, and the calls the harness had
refused show only in its own log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from openforge.rollouts.gateway_client import GatewayClient, GatewayError

__all__ = ["GatewayWatch"]


@dataclass(slots=True)
class _Failure:
    at: float  # time.monotonic() of the failed probe
    error: str
    count: int  # failed probes so far in the run


class GatewayWatch:
    """Probe the gateway's health in the background; remember when it was unreachable."""

    def __init__(self, client: GatewayClient, interval_s: float, timeout_s: float) -> None:
        self._client = client
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._last: _Failure | None = None
        self._count = 0
        self._task: asyncio.Task[None] | None = None
        self._inflight: asyncio.Future[bool] | None = None

    async def probe(self) -> bool:
        """One health probe now; a failure is remembered. True when the gateway answered.

        Callers that arrive while a probe is in flight share it (hundreds of rollouts may
        end at once).
        """
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._probe())
        return await asyncio.shield(self._inflight)

    async def _probe(self) -> bool:
        try:
            await self._client.health(self._timeout_s)
        except GatewayError as exc:
            self._count += 1
            self._last = _Failure(time.monotonic(), str(exc), self._count)
            return False
        return True

    async def _loop(self) -> None:
        while True:
            await self.probe()
            await asyncio.sleep(self._interval_s)

    def start(self) -> None:
        """Start probing every ``interval_s`` (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="openforge-gateway-watch")

    async def stop(self) -> None:
        """Stop probing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._inflight is not None and not self._inflight.done():
            self._inflight.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._inflight

    async def lost_since(self, since: float) -> str | None:
        """Why the gateway counts as lost since ``since`` (``time.monotonic()``), or None.

        Probes once more first, so a gateway that is down right now is always reported.
        """
        await self.probe()
        last = self._last
        if last is None or last.at < since:
            return None
        return (
            f"gateway lost mid-run: health check failed {time.monotonic() - last.at:.1f}s ago"
            f" ({last.count} failed checks in this run): {last.error}"
        )
