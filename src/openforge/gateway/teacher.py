"""Teacher calls: serving a text-level engine (:class:`~openforge.engines.base.TextEngine`).

A teacher (an upstream API such as ``--engine upstream --api openai``) takes the
canonical conversation as text and returns one finished :class:`Completion`. The gateway
answers the harness in its own dialect from that completion (a stream is the finished
answer emitted as deltas) and records the call with engine ``"upstream"`` so SFT exports
get a tokenized form:

* ``prompt_ids``: the conversation rendered by OpenForge's renderer (what our model would
  be prompted with);
* ``output_ids``: ``renderer.encode_reply(text, reasoning, tool_calls)`` of the teacher's
  answer — the tokens our model would have to emit to give that answer under the
  template. They were **not sampled** by any engine; ``output_logprobs`` is empty.
  ``traces`` never uses teacher calls as RL samples (``traces.graph.TEACHER_ENGINE``).

Tool calls get fresh ids in the harness's dialect style, as for token engines.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.types import Send

from openforge.conversation import (
    Completion,
    CompletionDelta,
    Conversation,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
)
from openforge.dialects.ids import new_id
from openforge.engines.base import EngineError, TextEngine
from openforge.gateway.asgi import send_full
from openforge.gateway.call import UNRECORDED, Call, Commit, ContextOf, engine_error
from openforge.gateway.recording import Recorder
from openforge.gateway.streaming import SSE_HEADERS

if TYPE_CHECKING:
    from openforge.rendering.renderer import Renderer

__all__ = ["answer_from_teacher", "completion_deltas", "first_completion", "teacher_completion"]


async def first_completion(answers: AsyncIterator[Completion]) -> Completion:
    """The one finished answer a text engine yields; EngineError when it yields none."""
    try:
        async for completion in answers:
            return completion
    finally:
        await answers.aclose()  # type: ignore[attr-defined]
    raise EngineError("the text engine returned no answer")


def teacher_completion(
    answer: Completion,
    renderer: Renderer,
    prompt_ids: list[int],
    tool_prefix: str,
    model: str,
) -> Completion:
    """The teacher's answer with dialect-style tool ids, encoded output ids and our usage."""
    calls = [ToolCall(new_id(tool_prefix), c.name, c.arguments) for c in answer.tool_calls]
    output_ids = renderer.encode_reply(answer.text, answer.reasoning, calls, validate=False)
    # No logprobs: not sampled (see the module docstring); usage counted in our tokenizer,
    # like every answer the gateway gives.
    return Completion.from_tokens(
        answer.text,
        answer.reasoning,
        calls,
        answer.finish_reason,
        prompt_ids,
        output_ids,
        [],
        model,
    )


def completion_deltas(completion: Completion) -> list[CompletionDelta]:
    """A finished answer as the stream deltas a parser would have emitted for it."""
    out: list[CompletionDelta] = []
    if completion.reasoning:
        out.append(ReasoningDelta(completion.reasoning))
    if completion.text:
        out.append(TextDelta(completion.text))
    for i, call in enumerate(completion.tool_calls):
        out.append(ToolCallStart(i, call.id, call.name))
        out.append(ToolCallArgumentsDelta(i, call.arguments))
    return out


async def answer_from_teacher(
    call: Call,
    conversation: Conversation,
    engine: TextEngine,
    send: Send,
    *,
    renderer: Renderer,
    recorder: Recorder,
    context: ContextOf,
    commit: Commit,
) -> None:
    """Answer ``call`` from a text engine (a teacher), recorded before it is sent."""
    spec = call.served.dialect
    ctx = context(call, conversation)
    try:
        answer = await first_completion(engine.complete(conversation))
    except EngineError as exc:
        await recorder.fail(call, engine_error(exc), None, send)
        return
    call.first_token_s = time.perf_counter() - call.t0
    completion = teacher_completion(
        answer, renderer, call.prompt_ids, spec.tool_prefix, conversation.model
    )
    call.output_ids, call.completion = completion.output_ids, completion
    call.finish = completion.finish_reason
    if not await recorder.record(call):
        await send_full(send, *spec.render_error(UNRECORDED))
        return
    await commit(call, conversation, completion, ctx)
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
