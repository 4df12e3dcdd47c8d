"""This gateway as one of a fleet sharing a store: the pause and the weight version are
the store's shared state (:mod:`openforge.store.shared`), not this process's.

Every gateway applies each change of the shared state, in epoch order, and acknowledges
it once applied: a pause once its calls in flight have drained, new weights once its
engine has them (an engine in its own process loads the checkpoint itself; engine servers
are loaded once, by the gateway the update came through). A weight update through any
gateway (:meth:`Fleet.update_weights`) is then:

1. pause everywhere, and wait until every live gateway acknowledged it (drained);
2. load into the engine;
3. set the new version (and where it came from) everywhere, and wait for the
   acknowledgements again (the gateways with engines of their own have loaded it);
4. let calls through again (unless an operator paused the fleet meanwhile or before).

The update holds calls through ``ControlState.syncing`` (its gateway's id), not through
the operator's pause. If that gateway dies during the update the fleet stays held (the
engine may have new weights under the old version's stamp): the next update, or
``POST /admin/resume`` once the dead gateway is no longer seen, lets calls through.

So no gateway admits a call while the weights change, and each stamps the calls it
admits afterwards with the new version. A gateway counts as live while it refreshes its
row (every ``heartbeat_s``; ``stale_s`` without one and it is no longer waited for); the
same refresh rereads the state, so a notification a gateway missed is applied within a
heartbeat. A gateway started later applies the current state before it serves; the first
of a fleet (no other live) starts it afresh: not paused, each engine's own version. A call
still running when the version changed (one stamped through ``version`` alone, without a
checkpoint, which does not pause; or one on a gateway that was not waited for) keeps the
version it was admitted under and is marked (``render_info["weight_version_at_end"]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

from openforge.engines.base import AdapterEngine, Engine, TextEngine, UpdatableEngine
from openforge.gateway.control import Control
from openforge.store.base import Store, StoreError
from openforge.store.schemas import ControlState
from openforge.store.shared import KEEP, UNCHANGED, Keep, Weights

__all__ = ["Fleet"]

_log = logging.getLogger(__name__)
# Engines served by servers every gateway of a fleet shares: loaded once, by one gateway.
_SERVER_KINDS = ("vllm", "sglang")


class Fleet:
    """Applies the shared state to one gateway's :class:`Control` and engine, and makes
    the admin API's pause, resume and weight updates fleet-wide."""

    def __init__(
        self,
        control: Control,
        store: Store,
        engine: Engine | TextEngine,
        *,
        heartbeat_s: float = 1.0,
        stale_s: float = 10.0,
    ) -> None:
        self.control = control
        self.store = store
        self.engine = engine
        self.id = secrets.token_hex(8)
        self.heartbeat_s = heartbeat_s
        self.stale_s = stale_s
        # Whether this gateway's engine is its own (in this process), to load new weights
        # into when they were loaded through another gateway.
        self.own_engine = (
            isinstance(engine, UpdatableEngine) and engine.info().kind not in _SERVER_KINDS
        )
        self._applied = -1  # the last epoch applied (gate and version set)
        self._acked = -1  # the last epoch acknowledged (drained, loaded)
        self._apply_lock = asyncio.Lock()
        self._ack: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join the fleet (before serving): apply its current state, then follow it."""
        shared = self.store.shared
        if not await shared.live_others(self.id, self.stale_s):
            # The first of a fleet: a state left by an earlier one is no one's now.
            await shared.change(paused=False, weights=Weights(None), syncing=None)
        # Seen before the state is read: a change made after this waits for this gateway.
        await shared.seen(self.id, -1)
        await self.apply(await shared.state())
        self._tasks = [
            asyncio.create_task(self._follow(), name="fleet-follow"),
            asyncio.create_task(self._heartbeat(), name="fleet-heartbeat"),
        ]

    async def stop(self) -> None:
        """Stop following and leave the fleet (no longer waited for)."""
        for task in [*self._tasks, *([self._ack] if self._ack else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(StoreError):
            await self.store.shared.leave(self.id)

    async def apply(self, state: ControlState) -> None:
        """Apply ``state`` unless a later one was: the gate, the version (loading the
        weights into an engine of this process), then acknowledge it once drained."""
        async with self._apply_lock:
            if state.epoch <= self._applied:
                return
            self._applied = state.epoch
            if state.held:
                self.control.pause()
            await self._weights(state)
            if not state.held:
                self.control.resume()
            if self._ack is not None:
                self._ack.cancel()
            self._ack = asyncio.create_task(self._acknowledge(state), name="fleet-ack")

    async def _weights(self, state: ControlState) -> None:
        control = self.control
        engine_version = self.engine.info().weight_version
        if state.weight_version is None:  # none set through the store: the engine's own
            control.set_version(engine_version)
            return
        if state.weight_version == control.weight_version:
            return
        if self.own_engine and state.weights_path and engine_version != state.weight_version:
            assert isinstance(self.engine, UpdatableEngine)
            await control.drain()  # none in flight once paused; at start, none yet
            try:
                if state.adapter is not None:
                    raise ValueError(f"the {self.engine.info().kind} engine loads no adapters")
                await self.engine.update_weights(state.weights_path, state.weight_version)
            except Exception as exc:
                # Its calls are stamped with the weights it really has.
                _log.error(
                    "could not load weights %s from %s (stamping %s): %s",
                    state.weight_version, state.weights_path, engine_version, exc,
                )  # fmt: skip
                control.set_version(self.engine.info().weight_version)
                return
        elif not self.own_engine and isinstance(self.engine, AdapterEngine):
            # An engine server another gateway loaded: its requests name what was loaded.
            self.engine.route_adapter(state.adapter, state.weight_version)
        control.set_version(state.weight_version)

    async def _acknowledge(self, state: ControlState) -> None:
        if state.held:
            await self.control.drain()
        self._acked = max(self._acked, state.epoch)
        try:
            await self.store.shared.seen(self.id, self._acked)
        except StoreError as exc:  # the heartbeat tells it again
            _log.warning("could not acknowledge the admin change %d: %s", state.epoch, exc)

    async def _follow(self) -> None:
        async for state in self.store.shared.changes():
            await self.apply(state)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.store.shared.seen(self.id, self._acked)
                await self.apply(await self.store.shared.state())
            except StoreError as exc:
                _log.warning("fleet heartbeat: %s", exc)

    async def _wait_applied(self, epoch: int) -> None:
        """Until every other live gateway acknowledged ``epoch`` (and this one drained)."""
        if self.control.paused:
            await self.control.drain()
        told = time.monotonic()
        while behind := await self.store.shared.behind(self.id, epoch, self.stale_s):
            if time.monotonic() - told > 30.0:
                _log.warning("still waiting for gateways %s to apply change %d", behind, epoch)
                told = time.monotonic()
            await asyncio.sleep(0.05)

    async def _change(
        self,
        *,
        paused: bool | None = None,
        weights: Weights | None = UNCHANGED,
        syncing: str | Keep | None = KEEP,
    ) -> int:
        state = await self.store.shared.change(paused=paused, weights=weights, syncing=syncing)
        await self.apply(state)
        return state.epoch

    async def pause(self, wait: bool) -> None:
        """Hold new calls on every gateway; ``wait``: until all their calls drained."""
        epoch = await self._change(paused=True)
        if wait:
            await self._wait_applied(epoch)

    async def resume(self) -> None:
        """Let calls through on every gateway (those an update holds once it is over, or
        once its gateway is gone)."""
        await self._change(paused=False)
        shared = self.store.shared
        holder = (await shared.state()).syncing
        if holder is not None and holder != self.id:
            state = await shared.abandon_sync(holder, self.stale_s)
            if state is not None:
                _log.warning("gateway %s left a weight update unfinished: released", holder)
                await self.apply(state)

    async def stamp(self, version: str) -> None:
        """Stamp later calls with ``version`` everywhere, without pausing or loading (the
        engine got the weights some other way); calls running meanwhile are marked."""
        async with self.control.weights_lock, self.store.shared.lock():
            await self._change(weights=Weights(version))

    async def update_weights(
        self,
        version: str,
        path: str,
        load: Callable[[], Awaitable[None]],
        adapter: str | None = None,
    ) -> None:
        """Pause and drain every gateway, ``load()`` (into this gateway's engine), stamp
        ``version`` everywhere once each has the weights, and resume."""
        async with self.control.weights_lock, self.store.shared.lock():
            epoch = await self._change(syncing=self.id)
            try:
                await self._wait_applied(epoch)
                await load()
                epoch = await self._change(weights=Weights(version, path, adapter))
                await self._wait_applied(epoch)
            finally:
                await self._change(syncing=None)
