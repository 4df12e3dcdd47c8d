"""Several engine replicas behind one engine.

Routing: a rollout's calls go to one replica while it is live (its prefix is in that
replica's cache), chosen by rendezvous hashing of the rollout id over the replica URLs:
every gateway replica with the same URL list picks the same engine replica for a rollout
without talking to the others, and when a replica is taken out only its own rollouts move
(to their next choice), and move back when it returns. A call with no rollout goes to the
live replica with the fewest requests in flight. A replica that cannot be reached, or
fails before its first token, is taken out and the request is retried on another; a
background probe of its health endpoint brings it back. A replica that dies after tokens
were streamed fails the call with :class:`EngineError`: continuing elsewhere would splice
two samplings into one answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from openforge.engines.base import (
    EngineError,
    EngineInfo,
    EngineOverloaded,
    EngineRequest,
    TokenChunk,
)
from openforge.engines.remote import RemoteEngine, ReplicaDown, StreamBroken

__all__ = ["ReplicaSet", "affinity"]

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class _Replica:
    engine: RemoteEngine
    inflight: int = 0
    alive: bool = True


def affinity(rollout_id: str, url: str) -> int:
    """The rendezvous weight of a rollout on a replica: the highest weight wins.

    A keyed hash, not Python's ``hash`` (salted per process): every gateway process must
    compute the same weights.
    """
    digest = hashlib.blake2b(f"{rollout_id}\0{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ReplicaSet:
    """An engine spreading requests over replicas of one model (all vLLM or all SGLang)."""

    def __init__(
        self,
        engines: list[RemoteEngine],
        *,
        client: httpx.AsyncClient | None = None,
        probe_interval_s: float = 2.0,
    ) -> None:
        """``client``: the HTTP client the engines share, closed with the set."""
        if not engines:
            raise EngineError("a replica set needs at least one replica URL")
        self._replicas = [_Replica(e) for e in engines]
        self._probe_interval_s = probe_interval_s
        self._probe: asyncio.Task[None] | None = None
        self._client = client

    @property
    def replicas(self) -> list[RemoteEngine]:
        """The replica engines, in the order given."""
        return [r.engine for r in self._replicas]

    def alive(self) -> list[str]:
        """URLs of the replicas currently taking requests."""
        return [r.engine.url for r in self._replicas if r.alive]

    def info(self) -> EngineInfo:
        """The first replica's info (all serve the same model)."""
        return self._replicas[0].engine.info()

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Route, stream, and retry elsewhere only while nothing has been streamed."""
        tried: set[int] = set()
        last_error: EngineError | None = None
        while True:
            replica = self._pick(request.rollout_id, tried)
            if replica is None:
                raise last_error or EngineError("no live replica")
            tried.add(id(replica))
            streamed = False
            replica.inflight += 1
            try:
                async for chunk in replica.engine.generate(request):
                    streamed = True
                    yield chunk
                return
            except StreamBroken as exc:
                self._take_out(replica, exc)
                raise
            except (ReplicaDown, EngineOverloaded) as exc:
                if streamed:  # defensive: a replica error after tokens is never retried
                    self._take_out(replica, exc)
                    raise StreamBroken(f"{replica.engine.url} died mid-stream: {exc}") from exc
                if isinstance(exc, ReplicaDown):
                    self._take_out(replica, exc)
                last_error = exc
            finally:
                replica.inflight -= 1

    def _pick(self, rollout_id: str | None, tried: set[int]) -> _Replica | None:
        live = [r for r in self._replicas if r.alive and id(r) not in tried]
        if not live:
            return None
        if rollout_id is not None:
            return max(live, key=lambda r: affinity(rollout_id, r.engine.url))
        return min(live, key=lambda r: r.inflight)

    def _take_out(self, replica: _Replica, why: Exception) -> None:
        if replica.alive:
            log.warning("replica %s taken out: %s", replica.engine.url, why)
        replica.alive = False
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._probe_dead())

    async def _probe_dead(self) -> None:
        """Check dead replicas' health until all are back."""
        while any(not r.alive for r in self._replicas):
            await asyncio.sleep(self._probe_interval_s)
            for replica in self._replicas:
                if not replica.alive and await replica.engine.healthy():
                    log.warning("replica %s is back", replica.engine.url)
                    replica.alive = True

    async def update_weights(self, path: str, version: str) -> None:
        """Push the checkpoint to every replica; the first failure is raised after all ran."""
        results = await asyncio.gather(
            *(r.engine.update_weights(path, version) for r in self._replicas),
            return_exceptions=True,
        )
        for replica, result in zip(self._replicas, results, strict=True):
            if isinstance(result, BaseException):
                raise EngineError(f"weight update failed on {replica.engine.url}: {result}")

    async def load_adapter(self, name: str, path: str, version: str) -> None:
        """Load the LoRA adapter on every replica (see ``VLLMEngine.load_adapter``); the
        first failure is raised after all ran."""
        loads = []
        for replica in self._replicas:
            load = getattr(replica.engine, "load_adapter", None)
            if load is None:
                raise EngineError(f"the {replica.engine.kind} engine cannot load LoRA adapters")
            loads.append(load(name, path, version))
        results = await asyncio.gather(*loads, return_exceptions=True)
        for replica, result in zip(self._replicas, results, strict=True):
            if isinstance(result, BaseException):
                raise EngineError(f"adapter load failed on {replica.engine.url}: {result}")

    def route_adapter(self, name: str | None, version: str) -> None:
        """Route every replica's later requests to the adapter ``name`` (None: the base)."""
        for replica in self._replicas:
            route = getattr(replica.engine, "route_adapter", None)
            if route is not None:
                route(name, version)

    async def pause(self) -> None:
        """Pause every replica."""
        await asyncio.gather(*(r.engine.pause() for r in self._replicas))

    async def resume(self) -> None:
        """Resume every replica."""
        await asyncio.gather(*(r.engine.resume() for r in self._replicas))

    async def close(self) -> None:
        """Stop probing and close the replicas (and their shared client)."""
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        for replica in self._replicas:
            await replica.engine.close()
        if self._client is not None:
            await self._client.aclose()
