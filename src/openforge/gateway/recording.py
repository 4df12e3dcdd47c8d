"""Recording a model call: its request columns prepared while the engine generates, its
record committed before the answer's last byte, and a failed call recorded and answered
with the dialect's error."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.types import Send

from openforge.dialects.errors import ApiError
from openforge.gateway.asgi import send_full
from openforge.gateway.call import Call
from openforge.gateway.control import Control
from openforge.gateway.identity import harness_identity
from openforge.gateway.images import stored_conversation, stored_request
from openforge.gateway.prompting import Prompting
from openforge.gateway.streaming import StreamWriter
from openforge.store.base import Store
from openforge.store.schemas import CallRecord, CallRole, CallStatus

__all__ = ["Recorder"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Recorder:
    """Writes a service's calls to its store, as the role that service records."""

    store: Store
    prompting: Prompting
    control: Control  # its weight version goes on every record
    engine_kind: str
    served_model: str
    record_role: CallRole

    def request_fields(self, call: Call) -> dict[str, Any]:
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

    def prepare(self, call: Call) -> None:
        """Compute the call's request columns for the store now (``call.request``)."""
        try:
            fields = self.request_fields(call)
            call.request = self.store.prepare_call(CallRecord(**fields, status=CallStatus.OK))
        except Exception as exc:  # the record recomputes them, and reports what fails
            _log.debug("rollout %s call %d: not prepared: %r", call.state.rollout.id, call.seq, exc)

    async def record(self, call: Call) -> bool:
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
            **self.request_fields(call),
            status=call.status,
            output_ids=call.output_ids,
            output_logprobs=call.logprobs,
            finish_reason=call.finish,
            request_model=conv.model if conv is not None else "",
            engine=self.engine_kind,
            served_model=self.served_model,
            weight_version=self._version(call),
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

    def _version(self, call: Call) -> str:
        """The version the call was admitted under; a call that ran across a change of
        version is marked with the one at its end (``weight_version_at_end``)."""
        control = self.control
        if call.weight_version is None:  # not admitted (refused before the gate)
            return control.weight_version
        if call.version_changes != control.version_changes:
            call.render_info["weight_version_at_end"] = control.weight_version
        return call.weight_version

    async def fail(
        self, call: Call, err: ApiError, writer: StreamWriter | None, send: Send
    ) -> None:
        # The request's fault, not the engine's (a prompt past a context the engine found).
        refused = err.kind in ("invalid_request", "context_length")
        call.status = CallStatus.REJECTED if refused else CallStatus.ENGINE_ERROR
        call.error, call.finish = err.message, "error"
        await self.record(call)
        if writer is not None and writer.started:
            encoder = writer.encoder
            await writer.finish(lambda: encoder.error(err))
        else:
            await send_full(send, *call.served.dialect.render_error(err))
