"""One model call, end to end: auth → parse → render → context check → generate → encode → record.

A route hands :class:`CallService` the raw ASGI channel (through :class:`ModelCall`) so a
call can race its answer against the client's disconnect: when the client goes away, the
generating task is cancelled (which cancels the engine request) and the call is recorded
as ``client_aborted``. A call is recorded before the last byte of its answer is sent (the
store's ``record_call`` returns once committed), so an answered call is never lost.

Errors before the response starts are HTTP errors in the dialect's shape; once a stream
has started they go in-band as the dialect's error event.

The stages live beside it: the ASGI side (:mod:`~openforge.gateway.asgi`), the call in
flight and its errors (:mod:`~openforge.gateway.call`), recording
(:mod:`~openforge.gateway.recording`), answering from a token engine
(:mod:`~openforge.gateway.generate`) or from a teacher (:mod:`~openforge.gateway.teacher`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.types import Receive, Scope, Send

from openforge.conversation import Completion, Conversation
from openforge.dialects.catalog import DIALECTS
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.ids import new_id
from openforge.dialects.prefix import BodyMemo
from openforge.engines.base import Engine, TextEngine
from openforge.gateway.asgi import DisconnectWatch, send_full, wait_disconnect
from openforge.gateway.call import Call, ServedDialect, refused
from openforge.gateway.control import Control, RolloutState
from openforge.gateway.generate import TokenAnswers
from openforge.gateway.heap import release_free_memory
from openforge.gateway.images import CallImages
from openforge.gateway.limits import Limits
from openforge.gateway.prompting import Prompting
from openforge.gateway.recording import Recorder
from openforge.gateway.records import answer_message, conversation_from_json
from openforge.gateway.teacher import answer_from_teacher
from openforge.store.base import Store, StoreError
from openforge.store.schemas import SERVING_ROLES, CallRecord, CallRole, CallStatus, Rollout

__all__ = ["CallService"]

_log = logging.getLogger(__name__)


class CallService:
    """Serves model calls for every dialect over one engine and one store."""

    def __init__(
        self,
        engine: Engine | TextEngine,
        store: Store,
        control: Control,
        prompting: Prompting,
        limits: Limits | None = None,
        role: CallRole = CallRole.POLICY,
    ) -> None:
        self.engine = engine
        # A token engine is asked for ids; a text engine (a teacher API) for a Completion.
        self.token_engine: Engine | None = engine if isinstance(engine, Engine) else None
        self.text_engine: TextEngine | None = None if self.token_engine else engine  # type: ignore[assignment]
        self.store = store
        self.control = control
        self.prompting = prompting
        # The role of the keys this service answers, and the role its calls are recorded
        # with (a policy key answered by a text engine is a teacher's call).
        self.role = role
        self.record_role = (
            CallRole.TEACHER if role is CallRole.POLICY and self.text_engine else role
        )
        self.limits = limits or Limits()
        self.images = CallImages(store, self.limits)
        info = engine.info()
        self.engine_kind = info.kind
        self.served_model = info.model
        self.context_length = info.context_length
        # Every wire format, each with the state it keeps between calls.
        # A dialect's further routes share its state (a compaction resolves the same
        # previous_response_id as a response).
        served: list[ServedDialect] = []
        for d in DIALECTS:
            memory = d.new_state(self._stored_answer)
            served += [ServedDialect(v, memory) for v in (d, *d.variants)]
        self.dialects = tuple(served)
        self.recorder = Recorder(
            store, prompting, control, self.engine_kind, self.served_model, self.record_role
        )
        self.answers = (
            TokenAnswers(
                self.token_engine,
                prompting,
                self.recorder,
                self.context_length,
                self._context,
                self._commit,
            )
            if self.token_engine is not None
            else None
        )

    def owns(self, call: CallRecord) -> bool:
        """Whether a recorded call is one of this service's role (restores, stored answers)."""
        if self.role is CallRole.POLICY:
            return call.role not in SERVING_ROLES
        return call.role is self.role

    async def serve(
        self,
        served: ServedDialect,
        rollout: Rollout,
        body: bytes,
        t0: float,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Answer one model call, authorized for ``rollout`` and read (``body``, since the
        ``perf_counter`` time ``t0``), on the raw ASGI channel."""
        state = await self.control.rollout_state(rollout, self.role)
        try:
            seq = await self.control.allocate_seq(state)
        except StoreError as exc:  # finished through another replica, or the store is down
            await send_full(send, *served.dialect.render_error(refused(rollout, exc)))
            return
        if state.restore:
            await self._restore(state)
        call = Call(served, body, scope, state, seq, t0, time.time())
        # A judge's or simulated user's call does not wait out the policy's weight update.
        gated = self.role is CallRole.POLICY
        if gated:
            await self.control.admit()
        call.weight_version = self.control.weight_version
        call.version_changes = self.control.version_changes
        # Counted for the rollout's drain once past the pause gate: a call held there is
        # refused below if its rollout was finished meanwhile, and need not be waited for.
        state.enter()
        try:
            call.queued_s = time.perf_counter() - t0
            if state.closed:  # finished while this call waited (at the pause gate)
                closed = ApiError("permission", f"Rollout {rollout.id} is finished; no more calls.")
                call.status, call.error = CallStatus.REJECTED, closed.message
                await self.recorder.record(call)
                await send_full(send, *served.dialect.render_error(closed))
                return
            # The call is answered on this task; a watcher cancels it if the client goes
            # away (not a task of its own for the answer and a wait on both: fewer task
            # steps and loop turns per call).
            this = asyncio.current_task()
            assert this is not None
            gone = DisconnectWatch(this)
            watcher = asyncio.create_task(wait_disconnect(receive))
            watcher.add_done_callback(gone.seen)
            try:
                await self._answer(call, send)
            except asyncio.CancelledError:
                if not gone.cancelled:
                    raise
                this.uncancel()  # the client went away: the engine stopped, keep what was sampled
                if not call.recorded:
                    call.status, call.finish = CallStatus.CLIENT_ABORTED, "abort"
                    await self.recorder.record(call)
            finally:
                gone.answering = False
                watcher.cancel()
        finally:
            if gated:
                self.control.release()
            state.leave()
            if len(body) >= self.limits.offload_bytes:
                state.large_calls += 1
                # Once this frame is gone, so are the body and its parse: give them back.
                asyncio.get_running_loop().call_soon(release_free_memory)

    async def _answer(self, call: Call, send: Send) -> None:
        spec = call.served.dialect
        # A very large body is decoded and rendered on a worker thread (the tokenizer lets
        # go of the GIL), so the event loop keeps serving every other call meanwhile.
        offload = len(call.body) >= self.limits.offload_bytes
        try:
            memo = call.state.bodies.get(spec.name)
            if memo is None:
                memo = call.state.bodies[spec.name] = BodyMemo()
            if offload:
                conversation = await asyncio.to_thread(spec.parse, call.body, memo)
            else:
                conversation = spec.parse(call.body, memo)
            call.conversation = conversation
            self._check_counts(conversation)
            conversation = await call.served.memory.resolve(conversation, call.state.rollout.id)
            call.conversation = conversation
            call.images = await self.images.resolve(conversation)
            async with call.state.render_lock:  # a rollout's history renders one call at a time
                if offload:
                    rendered = await asyncio.to_thread(
                        self.prompting.render, conversation, call.state
                    )
                else:
                    rendered = self.prompting.render(conversation, call.state)
            call.rendered = rendered
            call.prompt_ids, call.fork = rendered.ids, rendered.fork
            call.render_info = rendered.info
            if len(call.prompt_ids) >= self.context_length:
                raise ApiError.context_length(len(call.prompt_ids), self.context_length)
        except ApiError as err:
            call.status, call.error = CallStatus.REJECTED, err.message
            await self.recorder.record(call)
            await send_full(send, *spec.render_error(err))
            return
        if self.answers is not None:
            await self.answers.generate(call, conversation, send)
        else:
            assert self.text_engine is not None
            await answer_from_teacher(
                call,
                conversation,
                self.text_engine,
                send,
                renderer=self.prompting.renderer,
                recorder=self.recorder,
                context=self._context,
                commit=self._commit,
            )

    def _check_counts(self, conversation: Conversation) -> None:
        """Refuse conversations past the gateway's tool and message limits (each costs
        memory for the rollout's lifetime)."""
        limits = self.limits
        for what, count, limit in (
            ("tools", len(conversation.tools), limits.max_tools),
            ("messages", len(conversation.messages), limits.max_messages),
        ):
            if count > limit:
                raise ApiError(
                    "invalid_request",
                    f"{count} {what} exceed this gateway's limit of {limit}.",
                    what,
                )

    async def _restore(self, state: RolloutState) -> None:
        """Rebuild a rollout's rendering history from the store (first call after a restart)."""
        async with state.restore_lock:
            if not state.restore:
                return
            try:
                calls = [c for c in await self.store.calls(state.rollout.id) if self.owns(c)]
            except StoreError as exc:  # serve on; later calls render from text (forks)
                _log.warning("rollout %s: cannot read calls to restore: %s", state.rollout.id, exc)
                state.restore = False
                return
            replayed, differ = self.prompting.restore(state, calls)
            state.restore = False
            if differ:
                _log.warning(
                    "rollout %s: %d of %d restored calls render differently now",
                    state.rollout.id,
                    differ,
                    replayed,
                )

    async def _stored_answer(self, rollout_id: str, response_id: str) -> Conversation | None:
        """An answered conversation of ``rollout_id`` from the store (answered by another
        replica, before a restart, or evicted from a dialect's memory); None for another
        rollout's or an unknown id."""
        try:
            call = await self.store.call_by_response_id(rollout_id, response_id)
        except StoreError:
            return None
        if call is None or call.rollout_id != rollout_id or call.status != CallStatus.OK:
            return None
        if not self.owns(call):  # a judge never continues the agent's answers, nor back
            return None
        conversation = conversation_from_json(call.conversation)
        if conversation.metadata.get("store", True) is False:
            return None
        return Conversation(
            messages=[*conversation.messages, answer_message(call.completion)],
            compact=conversation.compact,  # a compaction's answer is a summary, not a turn
            summaries=conversation.summaries,
        )

    def _context(self, call: Call, conversation: Conversation) -> ResponseContext:
        ctx = ResponseContext.for_request(
            conversation,
            new_id(call.served.dialect.response_prefix),
            prompt_tokens=len(call.prompt_ids),
            token_text=self.prompting.token_text,
        )
        call.response_id = ctx.response_id
        return ctx

    async def _commit(
        self, call: Call, conversation: Conversation, completion: Completion, ctx: ResponseContext
    ) -> None:
        if call.rendered is not None:
            async with call.state.render_lock:  # not while a worker thread renders
                self.prompting.commit(call.state, call.rendered, completion)
        memory = call.served.memory
        memory.remember(call.state.rollout.id, ctx.response_id, conversation, completion)
