"""Tool calls and their results must pair up, as every vendor API insists.

A tool result that answers no call, two calls with one id, or two results for one call are
refused by OpenAI (``messages with role 'tool' must be a response to a preceeding message
with 'tool_calls'``, ``Duplicate value for 'tool_call_id'``; Responses' ``No tool call found
for function call output``) and by Anthropic (``unexpected tool_use_id found in tool_result
blocks``, ``tool_use ids must be unique``). Served anyway, such a prompt renders a tool
answer the model never asked for: a conversation no harness produces, trained on as if one
had. Each dialect words the refusal its own way through :class:`ToolIdWords`.

How far back a result may look for its call differs: OpenAI accepts a call of any earlier
assistant message (``SCOPE_CONVERSATION``); Anthropic only one of the previous assistant
turn (``SCOPE_LAST_TURN``: the assistant messages since the last user turn; user and system
turns between that turn and the result do not end it, as Anthropic merges consecutive
turns of one role).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from openforge.conversation import Message
from openforge.dialects.errors import ApiError

__all__ = ["SCOPE_CONVERSATION", "SCOPE_LAST_TURN", "Scope", "ToolIdWords", "check_tool_ids"]

Scope = Literal["conversation", "last_turn"]
SCOPE_CONVERSATION: Scope = "conversation"
SCOPE_LAST_TURN: Scope = "last_turn"


@dataclass(frozen=True, slots=True)
class ToolIdWords:
    """A dialect's refusals, each a (message, param) pair of templates filled with
    ``{where}``, the wire index of the message, and ``{call_id}``."""

    orphan: tuple[str, str]  # a result that answers no call
    duplicate_call: tuple[str, str]  # two calls with one id
    duplicate_result: tuple[str, str]  # two results for one call
    # The param when ``where`` is None (the message came from a stored response, not from
    # this request's body); None: the template's, with ``None`` as the index.
    unindexed_param: str | None = None

    def error(self, refusal: tuple[str, str], where: int | None, call_id: str) -> ApiError:
        """``refusal`` (one of this object's pairs) as the dialect's ApiError."""
        message, param = refusal
        if where is None and self.unindexed_param is not None:
            param = self.unindexed_param
        return ApiError(
            "invalid_request",
            message.format(where=where, call_id=call_id),
            param.format(where=where, call_id=call_id),
        )


def check_tool_ids(
    messages: Iterable[tuple[int | None, Message]], words: ToolIdWords, scope: Scope
) -> None:
    """Raise the dialect's ApiError for the first result without its call, call id used
    twice, or call answered twice in ``messages`` (each with its wire index)."""
    calls: set[str] = set()  # every call id so far
    turn: set[str] = set()  # the ids of the latest assistant turn (SCOPE_LAST_TURN)
    answered: set[str] = set()
    last_role = ""
    for where, msg in messages:
        role = msg.role
        if role == "assistant":
            if last_role != "assistant":
                turn = set()
            for call in msg.tool_calls:
                if call.id in calls:
                    raise words.error(words.duplicate_call, where, call.id)
                calls.add(call.id)
                turn.add(call.id)
        elif role == "tool":
            call_id = msg.tool_call_id or ""
            if call_id not in (turn if scope == SCOPE_LAST_TURN else calls):
                raise words.error(words.orphan, where, call_id)
            if call_id in answered:
                raise words.error(words.duplicate_result, where, call_id)
            answered.add(call_id)
        if role != "system":
            last_role = role
