"""Stored responses: what ``previous_response_id`` refers to, scoped to the caller's rollout.

A Responses request may carry only the new input and name the answer it continues. The
gateway keeps the latest answered conversations in memory and falls back to the store (an
answer given before a restart, or evicted); either way a lookup is keyed by the rollout the
call belongs to, so one rollout can never continue, or read, another rollout's answer.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from openforge.conversation import Completion, Conversation, Summary
from openforge.dialects.dialect import StoredAnswer
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses.compaction import compacted_history
from openforge.dialects.openai_responses.parse import TOOL_ID_WORDS
from openforge.dialects.toolids import SCOPE_CONVERSATION, check_tool_ids

__all__ = ["StoredResponses"]


class StoredResponses:
    """The Responses API's state: answered conversations by (rollout, response id)."""

    def __init__(self, stored: StoredAnswer, capacity: int = 10_000) -> None:
        self._stored = stored
        self._capacity = capacity
        self._recent: OrderedDict[tuple[str, str], Conversation] = OrderedDict()

    async def resolve(self, conversation: Conversation, rollout_id: str) -> Conversation:
        """The stored conversation before ``conversation``'s own input; 404 if unknown, 400
        when an output of the input answers no call of either (or one is answered twice)."""
        previous = conversation.metadata.get("previous_response_id")
        if not previous:
            return conversation
        prior = self._recent.get((rollout_id, previous))
        if prior is None:
            prior = await self._stored(rollout_id, previous)
        if prior is not None and prior.compact is not None:  # from the store, answer last
            answer = prior.messages[-1].text
            asked = dataclasses.replace(prior, messages=prior.messages[:-1])
            prior = compacted_history(asked, answer, previous)
        if prior is None:
            raise ApiError(
                "not_found",
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
            )
        messages = [*prior.messages, *conversation.messages]
        # Its outputs may answer the stored calls: paired now that both are known.
        check_tool_ids(((None, m) for m in messages), TOOL_ID_WORDS, SCOPE_CONVERSATION)
        shift = len(prior.messages)  # the summaries it carries moved by the stored turns
        summaries = [
            *prior.summaries,
            *(Summary(s.message + shift, s.source) for s in conversation.summaries),
        ]
        return dataclasses.replace(conversation, messages=messages, summaries=summaries)

    def remember(
        self, rollout_id: str, response_id: str, conversation: Conversation, completion: Completion
    ) -> None:
        """Keep the answered conversation unless the request said ``store: false``; a
        compaction's is the history it leaves (continuing it continues the summary)."""
        if conversation.metadata.get("store", True) is False:
            return
        if conversation.compact is not None:
            answered = compacted_history(conversation, completion.text, response_id)
        else:
            answered = Conversation(messages=[*conversation.messages, completion.message()])
        self._recent[(rollout_id, response_id)] = answered
        if len(self._recent) > self._capacity:
            self._recent.popitem(last=False)
