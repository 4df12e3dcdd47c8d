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

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from openforge.conversation import (
    Completion,
    CompletionDelta,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallArgumentsDelta,
    ToolCallStart,
    Usage,
)
from openforge.dialects.ids import new_id
from openforge.engines.base import EngineError

if TYPE_CHECKING:
    from openforge.rendering.renderer import Renderer

__all__ = ["completion_deltas", "first_completion", "teacher_completion"]


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
    finish = answer.finish_reason
    if calls and finish == "stop":
        finish = "tool_calls"
    return Completion(
        text=answer.text,
        reasoning=answer.reasoning,
        tool_calls=calls,
        finish_reason=finish,
        prompt_ids=prompt_ids,
        output_ids=output_ids,
        output_logprobs=[],  # not sampled: see the module docstring
        # Counted in our tokenizer, like every answer the gateway gives.
        usage=Usage(len(prompt_ids), len(output_ids)),
        model=model,
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
