"""Calls' canonical JSON: written for the store, and read back into canonical objects.

The store keeps each call's canonical conversation as orjson writes the
:class:`~openforge.conversation.Conversation` dataclass (:class:`ConversationJson` writes
those bytes a message at a time), and its completion as
:meth:`Prompting.completion_json` wrote it. After a gateway restart these are read back
to rebuild a rollout's rendering history and to resolve Responses
``previous_response_id`` from the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import orjson

from openforge.conversation import (
    ContentPart,
    Conversation,
    ImagePart,
    Message,
    ResponseFormat,
    SamplingParams,
    Summary,
    TextPart,
    ToolCall,
    ToolChoice,
    ToolSpec,
    assistant_message,
    tools_json,
)

__all__ = ["ConversationJson", "answer_message", "conversation_from_json", "message_from_json"]

_PARAMS = frozenset(SamplingParams.__slots__)
_FIELDS = tuple(f.name for f in fields(Conversation))


class ConversationJson:
    """A rollout's conversations as the store records them, each message serialised once.

    Every call's record holds its whole conversation; serialising all of it again cost
    each call time in proportion to the history. A message the rollout's parser kept
    from the previous body is the very same object (:mod:`openforge.dialects.prefix`),
    so its JSON is kept by identity, for as long as the rollout's latest conversation
    holds it. The bytes are those of ``orjson.dumps(conversation)``.
    """

    __slots__ = ("_json", "_messages", "_seen")

    def __init__(self) -> None:
        # A rollout's first conversation is not kept (it may be its only one).
        self._seen = False
        # The last conversation's messages and their JSON, by position: the messages a
        # parser keeps are the leading ones (two lists; a dict of pairs would give the
        # cyclic GC an object per message to walk for the rollout's life). Empty tuples
        # until then, which the GC does not track.
        self._messages: Sequence[Message] = ()
        self._json: Sequence[orjson.Fragment] = ()

    def of(self, conversation: Conversation) -> dict[str, Any]:
        """``conversation`` as an object for ``orjson.dumps``, its messages ready as JSON."""
        kept, made = self._messages, self._json
        messages = conversation.messages
        same = 0
        while same < len(kept) and same < len(messages) and kept[same] is messages[same]:
            same += 1
        pieces = [*made[:same], *(orjson.Fragment(orjson.dumps(m)) for m in messages[same:])]
        if self._seen:
            self._messages, self._json = list(messages), pieces
        self._seen = True
        out = {name: getattr(conversation, name) for name in _FIELDS}
        out["messages"] = pieces
        out["tools"] = orjson.Fragment(tools_json(conversation.tools))
        return out


def _part(d: dict[str, Any]) -> ContentPart:
    if d.get("type") == "image":  # its bytes are in the store's blobs, by sha256
        return ImagePart(
            url=d.get("url", ""),
            media_type=d.get("media_type"),
            sha256=d.get("sha256"),
            width=int(d.get("width") or 0),
            height=int(d.get("height") or 0),
            detail=d.get("detail"),
            param=d.get("param"),
        )
    return TextPart(d.get("text", ""))


def _response_format(d: dict[str, Any] | None) -> ResponseFormat | None:
    if not d:
        return None
    return ResponseFormat(
        d["type"], d.get("schema"), d.get("name"), bool(d.get("strict")), d.get("param")
    )


def _calls(items: list[dict[str, Any]] | None) -> list[ToolCall]:
    return [
        ToolCall(id=c.get("id", ""), name=c.get("name", ""), arguments=c.get("arguments", ""))
        for c in items or []
    ]


def message_from_json(d: dict[str, Any]) -> Message:
    """One stored message."""
    return Message(
        role=d["role"],
        content=[_part(p) for p in d.get("content") or []],
        tool_calls=_calls(d.get("tool_calls")),
        tool_call_id=d.get("tool_call_id"),
        name=d.get("name"),
        reasoning=d.get("reasoning"),
    )


def conversation_from_json(d: dict[str, Any]) -> Conversation:
    """A stored canonical conversation; unknown keys are ignored."""
    choice = d.get("tool_choice") or {}
    params = {k: v for k, v in (d.get("params") or {}).items() if k in _PARAMS}
    params["response_format"] = _response_format(params.get("response_format"))
    return Conversation(
        messages=[message_from_json(m) for m in d.get("messages") or []],
        tools=tuple(
            ToolSpec(
                name=t["name"],
                description=t.get("description", ""),
                parameters=t.get("parameters") or {"type": "object", "properties": {}},
            )
            for t in d.get("tools") or []
        ),
        tool_choice=ToolChoice(mode=choice.get("mode", "auto"), name=choice.get("name")),
        parallel_tool_calls=bool(d.get("parallel_tool_calls", True)),
        params=SamplingParams(**params),
        model=d.get("model", ""),
        stream=bool(d.get("stream", False)),
        reasoning=bool(d.get("reasoning", False)),
        ignored_tools=list(d.get("ignored_tools") or []),
        metadata=dict(d.get("metadata") or {}),
        compact=d.get("compact"),
        summaries=[
            Summary(int(x.get("message", -1)), str(x.get("source", "")))
            for x in d.get("summaries") or []
            if isinstance(x, dict)
        ],
    )


def answer_message(completion: dict[str, Any]) -> Message:
    """The assistant message a stored completion parsed to (as the history records it)."""
    text, reasoning = completion.get("text") or "", completion.get("reasoning")
    return assistant_message(text, _calls(completion.get("tool_calls")), reasoning)
