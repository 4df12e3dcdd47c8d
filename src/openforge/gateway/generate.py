"""Answering a call from a token engine: the engine request goes out first; what needs no
output (the parser, the response context, the stream writer, the store's request columns)
is made while the engine works; ids are streamed (or gathered) as they come; the answer
is parsed, recorded and committed, and its last byte sent only after the record."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from starlette.types import Send

from openforge.conversation import CompletionDelta, Conversation
from openforge.dialects.context import ResponseContext
from openforge.engines.base import Engine, EngineError, EngineRequest
from openforge.gateway.asgi import send_full
from openforge.gateway.call import UNRECORDED, Call, Commit, ContextOf, engine_error
from openforge.gateway.prompting import CallParser, Prompting
from openforge.gateway.recording import Recorder
from openforge.gateway.stops import StopGuard, cut_at_stop
from openforge.gateway.streaming import StreamWriter

__all__ = ["TokenAnswers"]


@dataclass(frozen=True, slots=True)
class TokenAnswers:
    """A service's answers from its token engine; ``context`` and ``commit`` are the
    service's own stages."""

    token_engine: Engine
    prompting: Prompting
    recorder: Recorder
    context_length: int
    context: ContextOf
    commit: Commit

    async def generate(self, call: Call, conversation: Conversation, send: Send) -> None:
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
                ctx = self.context(call, conversation)
                if conversation.stream:
                    feed = parser.feed
                    if params.stop:
                        guard = call.stop_guard = StopGuard(params.stop)

                        def feed(ids: list[int]) -> list[CompletionDelta]:
                            return guard.filter(parser.feed(ids))

                    writer = StreamWriter(send, spec.encoder(ctx), feed)
                self.recorder.prepare(call)
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
                await self.recorder.fail(call, engine_error(exc, conversation), writer, send)
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

    async def _complete(
        self,
        call: Call,
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
            if not await self.recorder.record(call):
                await send_full(send, *call.served.dialect.render_error(UNRECORDED))
                return
            await self.commit(call, conversation, completion, ctx)
            await send_full(send, 200, call.served.dialect.render_response(completion, ctx))
            return
        if call.stop_guard is not None:
            tail = call.stop_guard.filter(tail) + call.stop_guard.flush()
        writer.push_deltas(tail)
        recorded = await self.recorder.record(call)  # the writer sends what is queued meanwhile
        encoder = writer.encoder
        if not recorded:  # the stream has started: the error goes in-band, no final event
            await writer.finish(lambda: encoder.error(UNRECORDED))
            return
        await self.commit(call, conversation, completion, ctx)
        await writer.finish(lambda: encoder.finish(completion))
