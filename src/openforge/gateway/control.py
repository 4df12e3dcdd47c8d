"""The gateway's mutable state outside any one call: the pause gate, the weight version,
in-flight accounting, per-rollout call counters and the anonymous rollout.

Pausing closes a gate that new calls wait on (they are held, never refused) while calls
already past the gate finish; :meth:`Control.drain` waits for those. A weight update is
pause → drain → load → stamp → resume, so every call is stamped with the version whose
weights produced it; with several gateways on one store every one of them pauses and
drains (gateway/fleet.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from openforge.dialects.prefix import BodyMemo
from openforge.gateway import cyclic_gc
from openforge.gateway.heap import release_free_memory
from openforge.gateway.records import ConversationJson
from openforge.store.base import Store
from openforge.store.schemas import CallRole, Rollout

if TYPE_CHECKING:
    from openforge.rendering.history import RolloutHistory

__all__ = ["Control", "RolloutSeq", "RolloutState"]


@dataclass(slots=True)
class RolloutSeq:
    """A rollout's call numbering in this process, shared by the states of all its roles
    (a judge's or simulated user's calls take their ``seq`` from the same sequence)."""

    next_seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class RolloutState:
    """What the gateway keeps in memory for one live rollout and one role of its calls.

    Each role renders against its own history: a judge's prompt is no continuation of the
    agent's conversation, and must not turn the agent's next call into a fork.
    """

    rollout: Rollout
    seq: RolloutSeq
    role: CallRole = CallRole.POLICY
    # Rendering history, kept between calls of the rollout (made by its first render).
    history: RolloutHistory | None = None
    calls: int = 0
    # Set when the rollout had calls this gateway did not serve (a restart, another
    # replica): its history is rebuilt from the store before its next call renders.
    restore: bool = False
    # Calls of this rollout between authorisation and their record; set when it is finished.
    in_flight: int = 0
    closed: bool = False
    # Held while the history is rendered against or extended (renders may run on threads).
    render_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    large_calls: int = 0  # calls with bodies past Limits.offload_bytes
    # The rollout's last body in each dialect, so the next one parses only what is new.
    bodies: dict[str, BodyMemo] = field(default_factory=dict)
    # Its messages' JSON for the records, made once per message.
    conversation_json: ConversationJson = field(default_factory=ConversationJson)
    # Made when first needed, which most rollouts never do: a state lives as long as its
    # rollout, and with many new rollouts each second such state is most of what the
    # young collections walk (docs/gateway.md, "The cyclic GC").
    _restore_lock: asyncio.Lock | None = field(default=None, init=False, repr=False)
    _idle: asyncio.Event | None = field(default=None, init=False, repr=False)  # set: none in flight

    def enter(self) -> None:
        """A call of this rollout starts (pair with :meth:`leave`)."""
        self.in_flight += 1
        if self._idle is not None:
            self._idle.clear()

    def leave(self) -> None:
        """A call of this rollout is over."""
        self.in_flight -= 1
        if self.in_flight == 0 and self._idle is not None:
            self._idle.set()

    async def idle(self) -> None:
        """Return once no call of this rollout is in flight."""
        if self.in_flight:
            if self._idle is None:
                self._idle = asyncio.Event()
            await self._idle.wait()

    @property
    def restore_lock(self) -> asyncio.Lock:
        """Held while the history is rebuilt from the store."""
        if self._restore_lock is None:
            self._restore_lock = asyncio.Lock()
        return self._restore_lock


class Control:
    """Pause gate, weight version and per-rollout state, shared by every request."""

    def __init__(self, store: Store, weight_version: str = "0") -> None:
        self.store = store
        self.weight_version = weight_version
        # Counts changes of the version: a call that saw another count when it was
        # admitted ran across a change, and is marked so (gateway/recording.py).
        self.version_changes = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0
        # rollout id → its numbering and the state of each role that made calls here
        self._rollouts: dict[str, tuple[RolloutSeq, dict[CallRole, RolloutState]]] = {}
        self._anonymous: Rollout | None = None
        self._anon_lock = asyncio.Lock()
        self._weights_lock = asyncio.Lock()

    @property
    def paused(self) -> bool:
        """Whether new calls are being held at the gate."""
        return not self._open.is_set()

    def pause(self) -> None:
        """Hold new calls at the gate; calls already admitted run on."""
        self._open.clear()

    def resume(self) -> None:
        """Let held and new calls through."""
        self._open.set()

    async def drain(self) -> None:
        """Wait until no admitted call is running."""
        await self._idle.wait()

    async def admit(self) -> None:
        """Wait at the gate, then count this call as in flight (pair with :meth:`release`)."""
        while not self._open.is_set():
            await self._open.wait()
        self.in_flight += 1
        self._idle.clear()

    def release(self) -> None:
        """The call admitted by :meth:`admit` is over."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
        if cyclic_gc.reclaim_due(self.in_flight):
            # After this call's answer has gone out, not in its way.
            asyncio.get_running_loop().call_soon(cyclic_gc.reclaim)

    def set_version(self, version: str) -> None:
        """Stamp calls recorded from now on with ``version``."""
        if version != self.weight_version:
            self.weight_version = version
            self.version_changes += 1

    @property
    def weights_lock(self) -> asyncio.Lock:
        """Serialises weight updates (and pause/resume around them)."""
        return self._weights_lock

    async def rollout_state(
        self, rollout: Rollout, role: CallRole = CallRole.POLICY
    ) -> RolloutState:
        """The live state of ``rollout``'s ``role`` calls, created on its first call here
        (after a restart too)."""
        entry = self._rollouts.get(rollout.id)
        if entry is None:
            entry = self._rollouts[rollout.id] = (RolloutSeq(), {})
        seq, roles = entry
        state = roles.get(role)
        if state is None:
            state = roles[role] = RolloutState(rollout=rollout, seq=seq, role=role)
        return state

    async def close(self, rollout_id: str, timeout_s: float) -> int:
        """Refuse the rollout's further calls and wait up to ``timeout_s`` for the ones in
        flight to end; returns how many were still running (they will be recorded as
        ``late``, never as the finished rollout's samples)."""
        entry = self._rollouts.get(rollout_id)
        if entry is None:
            return 0
        states = list(entry[1].values())
        for state in states:
            state.closed = True
        busy = [state.idle() for state in states if state.in_flight]
        if busy:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*busy), timeout_s)
        return sum(state.in_flight for state in states)

    async def allocate_seq(self, state: RolloutState) -> int:
        """The next call's ``seq``, allocated by the store (shared by every replica).

        A seq past the one this gateway expected means the rollout had calls it did not
        serve (before a restart, or through another replica): its rendering history is
        then rebuilt from the store before the call renders (``state.restore``).
        Allocations of one rollout are made one at a time so they come back in order; the
        numbering is shared by the rollout's roles, so a judge's call in between is no gap.
        """
        counter = state.seq
        async with counter.lock:
            seq = await self.store.allocate_seq(state.rollout.id)
            if seq > counter.next_seq:
                for other in self._rollouts.get(state.rollout.id, (counter, {}))[1].values():
                    other.restore = True
            counter.next_seq = max(counter.next_seq, seq + 1)
        return seq

    def forget(self, rollout_id: str) -> None:
        """Drop a finished rollout's in-memory state (its rendering history)."""
        entry = self._rollouts.pop(rollout_id, None)
        if entry is not None and any(s.large_calls for s in entry[1].values()):
            release_free_memory()  # its history held those large calls' text and ids

    async def anonymous(self) -> Rollout:
        """The rollout that keyless calls are recorded under (``--allow-anonymous``)."""
        if self._anonymous is None:
            async with self._anon_lock:
                if self._anonymous is None:
                    self._anonymous = await self.store.create_rollout(metadata={"anonymous": True})
        return self._anonymous
