"""The gateway's one seam onto ``rendering``: prompts in, parsed answers out, per rollout.

:class:`Prompting` owns the model's tokenizer and renderer. For each call it renders the
conversation against the rollout's in-memory history (token-exact: earlier answers of the
rollout come back as their recorded output ids), gives the call a :class:`CallParser`
that turns engine ids into stream deltas and the final :class:`Completion`, and commits
the answer to the history once the call is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openforge.conversation import (
    Completion,
    CompletionDelta,
    Conversation,
    FinishReason,
    ImagePart,
)
from openforge.dialects.errors import ApiError
from openforge.dialects.ids import new_id
from openforge.engines.base import PromptImage
from openforge.gateway.control import RolloutState
from openforge.store.schemas import CallRecord, CallStatus

if TYPE_CHECKING:  # rendering imports its tokenizer stack lazily; only the types here
    from openforge.rendering.history import RenderedPrompt
    from openforge.rendering.parsing import OutputParser

__all__ = ["CallParser", "Prompting", "Rendered"]


@dataclass(slots=True)
class Rendered:
    ids: list[int]
    prompt: RenderedPrompt  # needed to record the answer in the rollout's history
    fork: bool = False
    info: dict[str, Any] = field(default_factory=dict)


def _compaction_reason(conversation: Conversation, reason: str) -> str:
    """A fork's reason, led by the compaction that explains it when the prompt carries
    a summary in place of compacted turns (never a silent new branch)."""
    if not conversation.summaries:
        return reason
    last = conversation.summaries[-1]
    return (
        f"compacted: message {last.message} is the summary of compaction {last.source}, "
        f"standing for the turns it replaced ({reason})"
    )


class CallParser:
    """Engine ids → deltas (as they become certain) → the final :class:`Completion`."""

    __slots__ = ("_inner",)

    def __init__(self, inner: OutputParser) -> None:
        self._inner = inner

    def feed(self, ids: list[int]) -> list[CompletionDelta]:
        """Deltas made certain by ``ids``."""
        return self._inner.feed(ids)

    def flush(self) -> list[CompletionDelta]:
        """Deltas held back until the end of output."""
        return self._inner.flush()

    def finish(
        self,
        engine_finish: str,
        prompt_ids: list[int],
        output_ids: list[int],
        logprobs: list[float],
    ) -> Completion:
        """The whole answer; a finished answer with tool calls ends with "tool_calls"."""
        parsed = self._inner.finish()
        reason: FinishReason = "length" if engine_finish == "length" else "stop"
        if engine_finish == "abort":
            reason = "abort"
        return Completion.from_tokens(
            parsed.text,
            parsed.reasoning,
            parsed.tool_calls,
            reason,
            prompt_ids,
            output_ids,
            logprobs,
        )


class Prompting:
    """Renders prompts and parses answers for one model."""

    def __init__(
        self, model_dir: str, tool_format: str | None = None, reasoning_format: str | None = None
    ) -> None:
        """``tool_format`` / ``reasoning_format``: format names that override the ones the
        model's family is detected with (``openforge gateway --tool-format``)."""
        from openforge.rendering.families.catalog import resolve_family
        from openforge.rendering.renderer import Renderer
        from openforge.rendering.tokenizer import load_tokenizer
        from openforge.rendering.vision import load_vision

        self.tokenizer = load_tokenizer(model_dir)
        self.vision = load_vision(model_dir, self.tokenizer.token_id)
        family = resolve_family(self.tokenizer, tool_format, reasoning_format)
        self.renderer = Renderer(self.tokenizer, vision=self.vision, family=family)
        # Stop ids the family adds to the engine's eos (Harmony's <|call|>, say).
        self._stop_ids = self.renderer.stop_token_ids
        # One token's text, for logprobs in answers.
        self.token_text = self.tokenizer.token_text

    def render(self, conversation: Conversation, state: RolloutState) -> Rendered:
        """Prompt ids for ``conversation``, extending the rollout's history where it can."""
        if state.history is None:
            state.history = self.renderer.new_history()
        params = conversation.params
        if self._stop_ids and not set(self._stop_ids) <= set(params.stop_token_ids):
            # The engine must stop where the family's replies end (each conversation's
            # params are its own: parsed from this request's body).
            params.stop_token_ids = sorted({*params.stop_token_ids, *self._stop_ids})
        try:
            prompt = self.renderer.render(conversation, state.history)
        except ValueError as exc:  # RenderError, TokenizerError: the request cannot render
            raise ApiError("invalid_request", f"Cannot render the conversation: {exc}") from None
        info: dict[str, Any] = {"reused_tokens": prompt.reused_tokens}
        if prompt.fork_reason:
            info["fork_reason"] = _compaction_reason(conversation, prompt.fork_reason)
        if conversation.compact is not None:  # this call's answer is the summary
            info["compaction"] = conversation.compact
        if conversation.summaries:
            info["compacted"] = [
                {"message": s.message, "source": s.source} for s in conversation.summaries
            ]
        if prompt.drift:
            info["drift"] = [
                {"message": d.message_index, "position": d.position} for d in prompt.drift
            ]
        if prompt.images:
            info["images_omitted"] = prompt.images
        shown = [p for m in conversation.messages for p in m.content if isinstance(p, ImagePart)]
        if shown:  # the record refers to each image by digest (its bytes are a store blob)
            info["images"] = [self._image_info(p) for p in shown]
            if self.vision is not None:
                info["image_processor"] = self.vision.settings
        if prompt.image_parts and self.vision is not None:
            info["prompt_images"] = self._prompt_images(prompt.ids, prompt.image_parts)
        if prompt.parent is not None:
            info["parent"] = prompt.parent
        fmt = conversation.params.response_format
        if fmt is not None:  # sampled under a grammar: its logprobs are the constrained ones
            info["constrained"] = {"type": fmt.type, "name": fmt.name, "strict": fmt.strict}
        return Rendered(prompt.ids, prompt, prompt.fork, info)

    def _image_info(self, part: ImagePart) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sha256": part.sha256,
            "width": part.width,
            "height": part.height,
            "detail": part.detail,
        }
        if self.vision is not None and part.data is not None:
            out["grid_thw"] = list(self.vision.grid(part))
            out["tokens"] = self.vision.tokens(part)
        return out

    def _prompt_images(self, ids: list[int], parts: list[ImagePart]) -> list[dict[str, Any]]:
        """Where each image the VLM sees sits in the prompt, in prompt order: its digest,
        media type, grid and the offset and count of its pad ids. Training reads these
        to pair a sample's placeholders with the images' bytes (a client's typed
        ``<|vision_start|>`` stays text, so the start id only ever opens an image)."""
        assert self.vision is not None
        start = self.vision.start_id
        offsets: list[int] = []
        try:  # list.index scans in C: a 30k-token prompt costs microseconds, not a loop
            while len(offsets) < len(parts):
                offsets.append(ids.index(start, offsets[-1] if offsets else 0) + 1)
        except ValueError:  # cannot happen for a prompt the renderer made
            raise ApiError("internal", "image placeholders do not match the images") from None
        return [
            {
                "sha256": p.sha256,
                "media_type": p.media_type,
                "offset": at,
                "length": self.vision.tokens(p),
                "grid_thw": list(self.vision.grid(p)),
            }
            for p, at in zip(parts, offsets, strict=True)
        ]

    @staticmethod
    def engine_images(rendered: Rendered) -> list[PromptImage]:
        """The images a VLM prompt shows, in prompt order, for the engine."""
        return [
            PromptImage(p.data, p.media_type or "", p.sha256 or "")
            for p in rendered.prompt.image_parts
            if p.data is not None
        ]

    def parser(
        self, conversation: Conversation, tool_prefix: str, prompt_ids: list[int] | None = None
    ) -> CallParser:
        """A fresh parser whose tool calls get ids in the dialect's style; the request's
        tools type some formats' argument values, and the prompt tells whether the
        output starts inside a reasoning block the generation prompt opened."""
        inner = self.renderer.stream_parser(
            lambda: new_id(tool_prefix), tools=conversation.tools, prompt_ids=prompt_ids or ()
        )
        return CallParser(inner)

    def commit(self, state: RolloutState, rendered: Rendered, completion: Completion) -> None:
        """Remember the answer so the next call renders it from its exact ids."""
        assert state.history is not None  # render() made it
        state.history.record(rendered.prompt, completion.output_ids, completion.message())

    def restore(self, state: RolloutState, calls: list[CallRecord]) -> tuple[int, int]:
        """Rebuild a rollout's history from its stored calls (after a gateway restart).

        Each answered call is rendered again, in ``seq`` order, against the history being
        rebuilt and recorded with its stored output ids, exactly as :meth:`commit` did
        when it was served. Returns (calls replayed, calls whose prompt rendered
        differently from the stored ids, e.g. under another tokenizer).
        """
        from openforge.gateway.records import answer_message, conversation_from_json

        history = self.renderer.new_history()
        replayed = differ = 0
        for call in calls:
            if call.status != CallStatus.OK or not call.conversation or not call.completion:
                continue
            try:
                prompt = self.renderer.render(conversation_from_json(call.conversation), history)
            except (ValueError, KeyError, TypeError):
                differ += 1  # unreadable or unrenderable now: later calls fork as before
                continue
            differ += prompt.ids != call.prompt_ids
            history.record(prompt, call.output_ids, answer_message(call.completion))
            replayed += 1
        state.history = history
        return replayed, differ

    def count_tokens(self, conversation: Conversation) -> int:
        """Prompt tokens ``conversation`` renders to (no history)."""
        try:
            return self.renderer.count_tokens(conversation)
        except ValueError as exc:
            raise ApiError("invalid_request", f"Cannot render the conversation: {exc}") from None

    @staticmethod
    def completion_json(completion: Completion) -> dict[str, Any]:
        """Text, reasoning and tool calls of an answer (ids are stored separately)."""
        return {
            "text": completion.text,
            "reasoning": completion.reasoning,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in completion.tool_calls
            ],
            "finish_reason": completion.finish_reason,
        }
