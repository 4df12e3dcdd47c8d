"""One model call, end to end: auth → parse → render → context check → generate → encode → record.

A route hands :class:`CallService` the raw ASGI channel (through :class:`ModelCall`) so a
call can race its answer against the client's disconnect: when the client goes away, the
generating task is cancelled (which cancels the engine request) and the call is recorded
as ``client_aborted``. A call is recorded before the last byte of its answer is sent (the
store's ``record_call`` returns once committed), so an answered call is never lost.

Errors before the response starts are HTTP errors in the dialect's shape; once a stream
has started they go in-band as the dialect's error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Scope, Send

from openforge.conversation import Completion, CompletionDelta, Conversation, ImagePart
from openforge.dialects.catalog import DIALECTS
from openforge.dialects.context import ResponseContext
from openforge.dialects.dialect import ConversationState, Dialect
from openforge.dialects.errors import ApiError
from openforge.dialects.ids import new_id
from openforge.dialects.prefix import BodyMemo
from openforge.engines.base import (
    ContextOverflow,
    Engine,
    EngineError,
    EngineOverloaded,
    EngineRequest,
    EngineRequestError,
    TextEngine,
)
from openforge.gateway.control import Control, RolloutState
from openforge.gateway.heap import release_free_memory
from openforge.gateway.identity import harness_identity
from openforge.gateway.images import CallImages, stored_conversation, stored_request
from openforge.gateway.limits import Limits
from openforge.gateway.prompting import CallParser, Prompting, Rendered
from openforge.gateway.records import answer_message, conversation_from_json
from openforge.gateway.stops import StopGuard, cut_at_stop
from openforge.gateway.streaming import SSE_HEADERS, StreamWriter
from openforge.gateway.teacher import completion_deltas, first_completion, teacher_completion
from openforge.store.base import RolloutConflict, Store, StoreError
from openforge.store.rows import RequestColumns
from openforge.store.schemas import SERVING_ROLES, CallRecord, CallRole, CallStatus, Rollout

__all__ = ["CallService", "ServedDialect"]

_JSON = [(b"content-type", b"application/json")]
_log = logging.getLogger(__name__)
# What a client is told when its answer could not be recorded (it may retry).
_UNRECORDED = ApiError(
    "internal", "The gateway could not record this call (its store failed); please retry."
)


@dataclass(frozen=True, slots=True)
class ServedDialect:
    """A wire format as this gateway serves it: its declaration and its state."""

    dialect: Dialect
    memory: ConversationState


@dataclass(slots=True)
class _Call:
    """One call in flight: its inputs and what it produced so far (read by the recorder)."""

    served: ServedDialect
    body: bytes
    scope: Scope
    state: RolloutState
    seq: int
    t0: float
    created: float
    conversation: Conversation | None = None
    status: CallStatus = CallStatus.OK
    prompt_ids: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    stop_text: str | None = None
    fork: bool = False
    render_info: dict[str, Any] = field(default_factory=dict)
    completion: Completion | None = None
    error: str | None = None
    queued_s: float = 0.0
    first_token_s: float | None = None
    recorded: bool = False
    rendered: Rendered | None = None
    images: list[ImagePart] = field(default_factory=list)
    response_id: str | None = None
    stop_guard: StopGuard | None = None  # streaming with stop strings
    id: str = field(default_factory=lambda: new_id("call-"))
    # Its request columns, computed while the engine generated (the store's prepare_call).
    request: RequestColumns | None = None
    # The record's request-side fields, made once (the body with images is re-serialised).
    request_fields: dict[str, Any] | None = None


def declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, when it sends one (uvicorn has checked it is a
    number; a chunked body has none)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(scope: Scope, receive: Receive, limit: int, timeout_s: float) -> bytes:
    """The request body; ApiError past ``limit`` bytes or when it takes over ``timeout_s``
    (a client trickling its body would otherwise hold the connection and its buffer).

    A body whose ``Content-Length`` is already over ``limit`` is refused before a byte of
    it is read: the 413 goes out at once, and the server drops the rest as it arrives (a
    client declaring 10 GB was held until the body deadline)."""
    declared = declared_length(scope)
    if declared is not None and declared > limit:
        raise ApiError(
            "request_too_large",
            f"The request body ({declared} bytes, from Content-Length) exceeds {limit} bytes.",
        )
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise asyncio.CancelledError
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise ApiError("request_too_large", f"The request body exceeds {limit} bytes.")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise ApiError(
            "request_timeout", f"The request body did not arrive within {timeout_s:g} s."
        ) from None


async def send_full(send: Send, status: int, body: bytes, headers: list[Any] = _JSON) -> None:
    """A complete (non-streamed) HTTP response."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class _Gone:
    """Cancels the task answering a call once its client went away (``seen`` is the
    disconnect watcher's done callback), while it still answers it."""

    task: asyncio.Task[Any]
    answering: bool = True
    cancelled: bool = False

    def seen(self, watcher: asyncio.Task[None]) -> None:
        # A callback already scheduled when the answer ended finds it over: no cancel.
        if self.answering and not watcher.cancelled():
            self.cancelled = True
            self.task.cancel()


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _refused(rollout: Rollout, exc: StoreError) -> ApiError:
    if isinstance(exc, RolloutConflict):
        return ApiError("permission", f"Rollout {rollout.id} is finished; no more calls.")
    return ApiError("overloaded", f"The store is unavailable: {exc}")


def _engine_error(exc: EngineError, conversation: Conversation | None = None) -> ApiError:
    if isinstance(exc, ContextOverflow):  # the engine serves less context than configured
        return ApiError.context_length(exc.prompt_tokens, exc.limit)
    if isinstance(exc, EngineRequestError):  # the request's own fault: retrying won't help
        fmt = conversation.params.response_format if conversation is not None else None
        param = fmt.param if fmt is not None else None
        return ApiError("invalid_request", f"Cannot serve this request: {exc}", param)
    # Both map to 503 / 529 so harnesses retry.
    what = "overloaded" if isinstance(exc, EngineOverloaded) else "unavailable"
    return ApiError("overloaded", f"The engine is {what}: {exc}")


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
        self.dialects = tuple(ServedDialect(d, d.new_state(self._stored_answer)) for d in DIALECTS)

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
            await send_full(send, *served.dialect.render_error(_refused(rollout, exc)))
            return
        if state.restore:
            await self._restore(state)
        call = _Call(served, body, scope, state, seq, t0, time.time())
        # A judge's or simulated user's call does not wait out the policy's weight update.
        gated = self.role is CallRole.POLICY
        if gated:
            await self.control.admit()
        # Counted for the rollout's drain once past the pause gate: a call held there is
        # refused below if its rollout was finished meanwhile, and need not be waited for.
        state.enter()
        try:
            call.queued_s = time.perf_counter() - t0
            if state.closed:  # finished while this call waited (at the pause gate)
                closed = ApiError("permission", f"Rollout {rollout.id} is finished; no more calls.")
                call.status, call.error = CallStatus.REJECTED, closed.message
                await self._record(call)
                await send_full(send, *served.dialect.render_error(closed))
                return
            # The call is answered on this task; a watcher cancels it if the client goes
            # away (not a task of its own for the answer and a wait on both: fewer task
            # steps and loop turns per call).
            this = asyncio.current_task()
            assert this is not None
            gone = _Gone(this)
            watcher = asyncio.create_task(_wait_disconnect(receive))
            watcher.add_done_callback(gone.seen)
            try:
                await self._answer(call, send)
            except asyncio.CancelledError:
                if not gone.cancelled:
                    raise
                this.uncancel()  # the client went away: the engine stopped, keep what was sampled
                if not call.recorded:
                    call.status, call.finish = CallStatus.CLIENT_ABORTED, "abort"
                    await self._record(call)
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

    async def _answer(self, call: _Call, send: Send) -> None:
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
            await self._record(call)
            await send_full(send, *spec.render_error(err))
            return
        if self.text_engine is not None:
            await self._teach(call, conversation, self.text_engine, send)
        else:
            await self._generate(call, conversation, send)

    def _check_counts(self, conversation: Conversation) -> None:
        """Refuse conversations past the gateway's tool and message limits (each costs
        memory for the rollout's lifetime)."""
        limits = self.limits
        if len(conversation.tools) > limits.max_tools:
            raise ApiError(
                "invalid_request",
                f"{len(conversation.tools)} tools exceed this gateway's limit of "
                f"{limits.max_tools}.",
                "tools",
            )
        if len(conversation.messages) > limits.max_messages:
            raise ApiError(
                "invalid_request",
                f"{len(conversation.messages)} messages exceed this gateway's limit of "
                f"{limits.max_messages}.",
                "messages",
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
        return Conversation(messages=[*conversation.messages, answer_message(call.completion)])

    def _context(self, call: _Call, conversation: Conversation) -> ResponseContext:
        ctx = ResponseContext.for_request(
            conversation,
            new_id(call.served.dialect.response_prefix),
            prompt_tokens=len(call.prompt_ids),
            token_text=self.prompting.token_text,
        )
        call.response_id = ctx.response_id
        return ctx

    async def _teach(
        self, call: _Call, conversation: Conversation, engine: TextEngine, send: Send
    ) -> None:
        """Answer from a text engine (a teacher): see :mod:`openforge.gateway.teacher`."""
        spec = call.served.dialect
        ctx = self._context(call, conversation)
        try:
            answer = await first_completion(engine.complete(conversation))
        except EngineError as exc:
            await self._fail(call, _engine_error(exc), None, send)
            return
        call.first_token_s = time.perf_counter() - call.t0
        completion = teacher_completion(
            answer, self.prompting.renderer, call.prompt_ids, spec.tool_prefix, conversation.model
        )
        call.output_ids, call.completion = completion.output_ids, completion
        call.finish = completion.finish_reason
        if not await self._record(call):
            await send_full(send, *spec.render_error(_UNRECORDED))
            return
        await self._commit(call, conversation, completion, ctx)
        if not conversation.stream:
            await send_full(send, 200, spec.render_response(completion, ctx))
            return
        encoder = spec.encoder(ctx)
        deltas = b"".join([encoder.delta(d) for d in completion_deltas(completion)])
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await send(
            {
                "type": "http.response.body",
                "body": encoder.start() + deltas + encoder.finish(completion),
            }
        )

    async def _generate(self, call: _Call, conversation: Conversation, send: Send) -> None:
        spec = call.served.dialect
        params = conversation.params
        request = EngineRequest(
            prompt_ids=call.prompt_ids,
            params=params,
            rollout_id=call.state.rollout.id,
            request_id=f"{call.state.rollout.id}-{call.seq}",
            context_length=self.context_length,
            images=self.prompting.engine_images(call.rendered) if call.rendered else [],
            prompt_json=call.rendered.prompt.ids_json if call.rendered else None,
            # A JSON answer is sent once whole: an HTTP engine may answer it in one piece.
            stream=conversation.stream,
        )
        assert self.token_engine is not None
        chunks = self.token_engine.generate(request)
        # The request goes out first (the task's first step sends it); what needs no
        # output is done while the engine works, so less is left between its last token
        # and the answer (at one call at a time, the gateway would otherwise sit idle).
        first = asyncio.ensure_future(anext(chunks, None))
        writer = None
        try:
            try:
                await asyncio.sleep(0)
                parser = self.prompting.parser(conversation, spec.tool_prefix, call.prompt_ids)
                ctx = self._context(call, conversation)
                if conversation.stream:
                    feed = parser.feed
                    if params.stop:
                        guard = call.stop_guard = StopGuard(params.stop)

                        def feed(ids: list[int]) -> list[CompletionDelta]:
                            return guard.filter(parser.feed(ids))

                    writer = StreamWriter(send, spec.encoder(ctx), feed)
                self._prepare(call)
                chunk = await first
                while chunk is not None:
                    # A whole answer's arrival is not its first token's: left unknown.
                    if call.first_token_s is None and (
                        request.stream or chunk.finish_reason is None
                    ):
                        call.first_token_s = time.perf_counter() - call.t0
                    call.output_ids += chunk.ids
                    call.logprobs += chunk.logprobs
                    if writer is not None:  # a JSON answer is parsed once, after the last id
                        writer.push(chunk.ids)
                    if chunk.finish_reason is not None:
                        call.finish = chunk.finish_reason
                        call.stop_text = chunk.stop_text
                        break
                    chunk = await anext(chunks, None)
            except EngineError as exc:
                await self._fail(call, _engine_error(exc, conversation), writer, send)
                return
            finally:
                if not first.done():  # cancelled (or failed) before the engine's first token
                    first.cancel()
                with contextlib.suppress(asyncio.CancelledError, EngineError):
                    await first  # its end (or error) is taken, whichever path led here
                await chunks.aclose()  # type: ignore[attr-defined]
            await self._complete(call, conversation, parser, writer, ctx, send)
        finally:
            if writer is not None:
                writer.cancel()

    def _prepare(self, call: _Call) -> None:
        """Compute the call's request columns for the store now (``call.request``)."""
        try:
            fields = self._request_fields(call)
            call.request = self.store.prepare_call(CallRecord(**fields, status=CallStatus.OK))
        except Exception as exc:  # the record recomputes them, and reports what fails
            _log.debug("rollout %s call %d: not prepared: %r", call.state.rollout.id, call.seq, exc)

    async def _complete(
        self,
        call: _Call,
        conversation: Conversation,
        parser: CallParser,
        writer: StreamWriter | None,
        ctx: ResponseContext,
        send: Send,
    ) -> None:
        """Parse the rest, record, and end the answer (its last byte after the commit)."""
        if writer is None:
            parser.feed(call.output_ids)
        else:
            writer.parse_pending()
        tail = parser.flush()
        completion = parser.finish(
            call.finish or "stop", call.prompt_ids, call.output_ids, call.logprobs
        )
        completion.model = conversation.model
        if call.stop_text is not None:  # the client sees the text before the stop string
            completion.text, hit = cut_at_stop(completion.text, conversation.params.stop)
            completion.stop_sequence = hit or call.stop_text
        call.completion = completion
        call.finish = completion.finish_reason
        if writer is None:
            if not await self._record(call):
                await send_full(send, *call.served.dialect.render_error(_UNRECORDED))
                return
            await self._commit(call, conversation, completion, ctx)
            await send_full(send, 200, call.served.dialect.render_response(completion, ctx))
            return
        if call.stop_guard is not None:
            tail = call.stop_guard.filter(tail) + call.stop_guard.flush()
        writer.push_deltas(tail)
        recorded = await self._record(call)  # the writer sends what is queued meanwhile
        encoder = writer.encoder
        if not recorded:  # the stream has started: the error goes in-band, no final event
            await writer.finish(lambda: encoder.error(_UNRECORDED))
            return
        await self._commit(call, conversation, completion, ctx)
        await writer.finish(lambda: encoder.finish(completion))

    async def _fail(
        self, call: _Call, err: ApiError, writer: StreamWriter | None, send: Send
    ) -> None:
        # The request's fault, not the engine's (a prompt past a context the engine found).
        refused = err.kind in ("invalid_request", "context_length")
        call.status = CallStatus.REJECTED if refused else CallStatus.ENGINE_ERROR
        call.error, call.finish = err.message, "error"
        await self._record(call)
        if writer is not None and writer.started:
            encoder = writer.encoder
            await writer.finish(lambda: encoder.error(err))
        else:
            await send_full(send, *call.served.dialect.render_error(err))

    async def _commit(
        self, call: _Call, conversation: Conversation, completion: Completion, ctx: ResponseContext
    ) -> None:
        if call.rendered is not None:
            async with call.state.render_lock:  # not while a worker thread renders
                self.prompting.commit(call.state, call.rendered, completion)
        memory = call.served.memory
        memory.remember(call.state.rollout.id, ctx.response_id, conversation, completion)

    def _request_fields(self, call: _Call) -> dict[str, Any]:
        """The fields of the call's record that its request fixes (id, prompt, body,
        conversation): all :meth:`Store.prepare_call` reads. Made once per call: they are
        fixed once the request is rendered, and prepare and record both need them."""
        if call.request_fields is not None:
            return call.request_fields
        conv = call.conversation
        call.request_fields = {
            "id": call.id,
            "rollout_id": call.state.rollout.id,
            "seq": call.seq,
            "dialect": call.served.dialect.name,
            "prompt_ids": call.prompt_ids,
            "prompt_json": call.rendered.prompt.ids_json if call.rendered is not None else None,
            "raw_request": stored_request(call.body, call.images) if call.images else call.body,
            "conversation": (
                call.state.conversation_json.of(stored_conversation(conv))
                if conv is not None
                else {}
            ),
            "role": self.record_role,
        }
        return call.request_fields

    async def _record(self, call: _Call) -> bool:
        """Commit the call to the store; False (logged) when the store failed.

        An answer is sent as a success only once its call is durable, so a failed record
        turns the answer into an error in the dialect's shape (in-band once streaming)."""
        call.recorded = True
        if call.state.closed and call.status == CallStatus.OK:
            # Its rollout was finished while it ran: on the record, never a sample of it.
            call.status = CallStatus.LATE
        completion = call.completion
        conv = call.conversation
        record = CallRecord(
            **self._request_fields(call),
            status=call.status,
            output_ids=call.output_ids,
            output_logprobs=call.logprobs,
            finish_reason=call.finish,
            request_model=conv.model if conv is not None else "",
            engine=self.engine_kind,
            served_model=self.served_model,
            weight_version=self.control.weight_version,
            fork=call.fork,
            render_info=call.render_info,
            completion=self.prompting.completion_json(completion) if completion else {},
            error=call.error,
            harness=harness_identity(call.scope),
            created_at=call.created,
            queued_s=call.queued_s,
            first_token_s=call.first_token_s,
            total_s=time.perf_counter() - call.t0,
            response_id=call.response_id,
        )
        try:
            await self.store.record_call(record, call.request)
        except Exception as exc:  # any store failure (disk full, I/O, unencodable JSON)
            _log.error("rollout %s call %d: not recorded: %r", record.rollout_id, call.seq, exc)
            return False
        return True
