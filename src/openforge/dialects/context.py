"""What a renderer needs to know about the request besides the completion itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from openforge.conversation import Completion, Conversation

__all__ = ["ResponseContext"]


@dataclass(frozen=True, slots=True)
class ResponseContext:
    """Per-call facts a dialect echoes back or needs to shape its answer.

    ``response_id`` is minted by the gateway in the dialect's own style
    (``chatcmpl-…``, ``resp_…``, ``msg_…``); item ids inside a Responses answer are
    derived from it. ``model`` is the model name the client asked for, echoed back.
    ``token_text`` decodes one output token id to its text (for logprobs); without it
    logprob entries carry an empty token string. ``prompt_tokens`` is known before
    generation starts and shown in stream-start events. ``conversation`` is the parsed
    request, echoed where a dialect repeats request settings (Responses).
    """

    response_id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))
    logprobs: bool = False
    top_logprobs: int = 0
    # Chat Completions ``stream_options.include_usage``: a final usage-only chunk.
    include_usage: bool = False
    prompt_tokens: int = 0
    token_text: Callable[[int], str] | None = None
    conversation: Conversation | None = None

    @classmethod
    def for_request(
        cls,
        conversation: Conversation,
        response_id: str,
        *,
        created: int | None = None,
        prompt_tokens: int = 0,
        token_text: Callable[[int], str] | None = None,
    ) -> ResponseContext:
        """The context for answering ``conversation`` (as parsed by a dialect)."""
        return cls(
            response_id=response_id,
            model=conversation.model,
            created=int(time.time()) if created is None else created,
            logprobs=conversation.params.logprobs,
            top_logprobs=conversation.params.top_logprobs,
            include_usage=bool(conversation.metadata.get("include_usage", False)),
            prompt_tokens=prompt_tokens,
            token_text=token_text,
            conversation=conversation,
        )

    def sampled_tokens(self, completion: Completion) -> list[tuple[str, float]]:
        """(token text, logprob) of each sampled token, for logprobs in an answer.

        Only sampled tokens are known (engines return one logprob per sampled id), so
        dialects render ``top_logprobs`` as empty lists.
        """
        decode = self.token_text
        ids = completion.output_ids
        return [
            (decode(ids[i]) if decode is not None and i < len(ids) else "", lp)
            for i, lp in enumerate(completion.output_logprobs)
        ]
