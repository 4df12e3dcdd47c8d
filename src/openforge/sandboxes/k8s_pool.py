"""A warm pool of ready sandbox pods for the Kubernetes backend.

Starting a pod (scheduling, image, sandboxd start) takes seconds; a rollout should not
wait for it. The pool keeps ``size`` pods made from one ``SandboxSpec`` Running, Ready and
answering sandboxd's health check. ``claim(spec)`` hands out the oldest one that is still
young enough when ``spec`` asks for what the pool's pods have (image, workdir, resources,
network, a lifetime that fits); the backend relabels it to its rollout. A background task
refills the pool after each claim, death or recycle, with backoff while launches fail.
Pods older than ``max_age_s`` are recycled (deleted and replaced), so a claimed pod always
has its whole rollout lifetime left before its ``activeDeadlineSeconds``.

The pool only decides; creating, checking and deleting pods are the backend's functions,
passed in, so this module has no API client of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from openforge.sandboxes.base import SandboxSpec
from openforge.sandboxes.remote import SandboxdClient

__all__ = ["PooledPod", "WarmPool"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PooledPod:
    """A ready pool pod: sandboxd answered at ``ip`` with ``client``."""

    name: str
    client: SandboxdClient
    born: float  # event-loop time its launch began


class WarmPool:
    """Keeps ``size`` ready pods of ``spec``; see the module docstring."""

    def __init__(
        self,
        *,
        size: int,
        spec: SandboxSpec,
        prefix: str,
        launch: Callable[[str], Awaitable[PooledPod]],
        delete: Callable[[str], Awaitable[None]],
        fits: Callable[[SandboxSpec], bool],
        max_age_s: float,
        check_period_s: float = 30.0,
    ) -> None:
        self.size = size
        self.spec = spec
        self.max_age_s = max_age_s
        self.check_period_s = check_period_s
        self._prefix = prefix
        self._launch = launch
        self._delete = delete
        self._fits = fits
        self.ready: deque[PooledPod] = deque()
        self.pending: set[str] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._failures = 0

    def names(self) -> set[str]:
        """Every pod the pool owns (ready or being launched): the reconciler leaves them."""
        return {p.name for p in self.ready} | self.pending

    def start(self) -> None:
        """Start the background refill (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="openforge-k8s-pool")

    async def wait_full(self) -> None:
        """Wait until ``size`` pods are ready."""
        self.start()
        while len(self.ready) < self.size:
            self._changed.clear()
            await self._changed.wait()

    def claim(self, spec: SandboxSpec) -> PooledPod | None:
        """The oldest ready pod still young enough, if ``spec`` fits the pool; else None."""
        if not self._fits(spec):
            return None
        self.recycle(asyncio.get_running_loop().time())
        pod = self.ready.popleft() if self.ready else None
        self._wake.set()
        return pod

    def discard(self, name: str) -> bool:
        """Forget a ready pod that died or failed (the caller deletes it); True if it was one."""
        for pod in list(self.ready):
            if pod.name == name:
                self.ready.remove(pod)
                self._job(pod.client.aclose())
                self._wake.set()
                return True
        return False

    def recycle(self, now: float) -> list[str]:
        """Delete ready pods older than ``max_age_s`` at time ``now``; the refill replaces them."""
        old = [p for p in self.ready if now - p.born > self.max_age_s]
        for pod in old:
            self.ready.remove(pod)
            self._job(self._drop(pod))
        if old:
            self._wake.set()
        return [p.name for p in old]

    async def _drop(self, pod: PooledPod) -> None:
        await pod.client.aclose()
        await self._delete(pod.name)

    def _job(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            try:
                await coro
            except Exception as exc:  # a background step: log it, the next pass retries
                log.warning("warm pool: %r", exc)

        task = asyncio.create_task(run())
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.recycle(loop.time())
            for _ in range(self.size - len(self.ready) - len(self.pending)):
                name = f"{self._prefix}-{secrets.token_hex(4)}"
                self.pending.add(name)
                self._job(self._fill(name))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.check_period_s)

    async def _fill(self, name: str) -> None:
        try:
            pod = await self._launch(name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failures += 1
            log.warning("warm pool: pod %s failed to start: %r", name, exc)
            with contextlib.suppress(Exception):
                await self._delete(name)
            await asyncio.sleep(min(30.0, 0.25 * 2**self._failures))  # backoff, then refill
        else:
            self._failures = 0
            self.ready.append(pod)
            self._changed.set()
        finally:
            self.pending.discard(name)
            self._wake.set()

    async def close(self) -> None:
        """Stop refilling; delete every pod the pool still owns."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        doomed = sorted(self.pending)  # launches cut short may have made their pod already
        jobs = list(self._jobs)
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        doomed += [p.name for p in self.ready]
        for pod in self.ready:
            await pod.client.aclose()
        self.ready.clear()
        self.pending.clear()
        await asyncio.gather(*(self._delete(n) for n in doomed), return_exceptions=True)
