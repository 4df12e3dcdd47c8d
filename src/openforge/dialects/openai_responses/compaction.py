"""Compaction in the Responses API, served by the policy model itself.

A client asks for its context to be compacted in one of two ways: a ``compaction_trigger``
item at the end of a ``POST /v1/responses`` input (what Codex 0.171 sends to a provider
that offers remote compaction), or ``POST /v1/responses/compact`` (openai-python's
``responses.compact``). Either way the gateway appends :data:`INSTRUCTION` as a user turn
to the conversation and lets the policy answer it, as a call of the rollout like any
other (rendered against its history, recorded token-exactly); the answer's text is the
summary. It goes back as a ``compaction`` item, and a later input carrying that item
shows the model :func:`summary_message` in place of the turns the summary replaced, so
that call's prompt starts a new branch (a fork whose reason names the compaction).

The item's ``encrypted_content`` is opaque to the client but not secret: ``ofc1.``
followed by the base64url of ``{"summary", "source"}`` (the compaction call's response
id). The gateway reads it back without any state (after a restart, on another replica);
a harness could write any such text, but then it could write any user message too.
Content this gateway did not produce (OpenAI's encrypted kind) cannot be shown to the
model and is refused with a 400 naming the item.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from openforge.conversation import (
    Completion,
    Conversation,
    ImagePart,
    Message,
    Summary,
    TextPart,
)
from openforge.dialects.context import ResponseContext
from openforge.dialects.errors import ApiError
from openforge.dialects.openai_responses.protocol import (
    CompactedResponseOut,
    CompactionItem,
    CompactionOut,
    InputMessageOut,
    usage_out,
)

__all__ = [
    "ENDPOINT",
    "INSTRUCTION",
    "TRIGGER",
    "compacted_history",
    "compaction_item",
    "decode_content",
    "encode_content",
    "input_message",
    "instruction_message",
    "render_compacted",
    "summary_message",
]

TRIGGER = "compaction_trigger"  # Conversation.compact of a trigger item's request
ENDPOINT = "responses/compact"  # ... and of a POST /v1/responses/compact
_MAGIC = "ofc1."

INSTRUCTION = (
    "Your context is about to be compacted: everything above will be replaced by what you "
    "write now. Write a summary from which you can continue this task without the "
    "conversation: the goal and the user's requests, what was done and found so far, the "
    "current state (files, commands, results), and the next steps. Write only the summary, "
    "and call no tools."
)
_SUMMARY_HEAD = "The earlier part of this conversation was compacted into this summary:\n\n"


def encode_content(summary: str, source: str) -> str:
    """The ``encrypted_content`` of the compaction ``source`` (a response id) summarised."""
    raw = orjson.dumps({"summary": summary, "source": source})
    return _MAGIC + base64.urlsafe_b64encode(raw).decode("ascii")


def decode_content(content: str, where: str) -> tuple[str, str]:
    """(summary, source) of an item's ``encrypted_content``; a 400 naming
    ``{where}.encrypted_content`` when this gateway did not produce it."""
    param = f"{where}.encrypted_content"
    try:
        if not content.startswith(_MAGIC):
            raise ValueError(content[:16])
        data = orjson.loads(base64.urlsafe_b64decode(content[len(_MAGIC) :].encode("ascii")))
        summary, source = data["summary"], data["source"]
        if not isinstance(summary, str) or not isinstance(source, str):
            raise ValueError("not text")
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise ApiError(
            "invalid_request",
            f"Invalid value for '{param}': not a compaction made by this gateway "
            "(only its own can be shown to the model).",
            param,
        ) from None
    return summary, source


def summary_message(summary: str) -> Message:
    """What the model sees in place of the turns a compaction replaced."""
    return Message("user", [TextPart(_SUMMARY_HEAD + summary)])


def instruction_message() -> Message:
    """The user turn that asks the model for the summary."""
    return Message("user", [TextPart(INSTRUCTION)])


def input_message(item: CompactionItem, where: str) -> tuple[Message, str]:
    """A ``compaction`` input item's message, and the response it came from."""
    summary, source = decode_content(item.encrypted_content, where)
    return summary_message(summary), source


def _item_id(ctx: ResponseContext, prefix: str, index: int) -> str:
    return f"{prefix}_{ctx.response_id.removeprefix('resp_')}_{index}"


def compaction_item(ctx: ResponseContext, index: int, summary: str) -> CompactionOut:
    """The ``compaction`` output item of a compaction call answered ``summary``."""
    return {
        "id": _item_id(ctx, "cmp", index),
        "type": "compaction",
        "encrypted_content": encode_content(summary, ctx.response_id),
    }


def compacted_history(conversation: Conversation, summary: str, source: str) -> Conversation:
    """The conversation a compaction leaves: its system, developer and user turns (the
    instruction and earlier summaries left out: the new summary stands for them), then
    the summary."""
    drop = {s.message for s in conversation.summaries}
    if conversation.compact is not None:
        drop.add(len(conversation.messages) - 1)  # the instruction
    kept = [
        m
        for i, m in enumerate(conversation.messages)
        if i not in drop and m.role in ("system", "developer", "user")
    ]
    return Conversation(
        messages=[*kept, summary_message(summary)],
        summaries=[Summary(len(kept), source)],
    )


def _user_item(ctx: ResponseContext, index: int, message: Message) -> InputMessageOut:
    content: list[dict[str, Any]] = [
        {"type": "input_image", "image_url": p.url, "detail": p.detail or "auto"}
        if isinstance(p, ImagePart)
        else {"type": "input_text", "text": p.text}
        for p in message.content
    ]
    return {
        "id": _item_id(ctx, "msg", index),
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": content,
    }


def render_compacted(completion: Completion, ctx: ResponseContext) -> bytes:
    """``POST /v1/responses/compact``'s answer: the input's user messages, then one
    compaction item (openai-python's ``CompactedResponse``)."""
    conv = ctx.conversation or Conversation(messages=[])
    history = compacted_history(conv, completion.text, ctx.response_id)
    users = [m for m in history.messages[:-1] if m.role == "user"]
    output: list[InputMessageOut | CompactionOut] = [
        _user_item(ctx, i, m) for i, m in enumerate(users)
    ]
    output.append(compaction_item(ctx, len(output), completion.text))
    body: CompactedResponseOut = {
        "id": ctx.response_id,
        "object": "response.compaction",
        "created_at": ctx.created,
        "output": output,
        "usage": usage_out(completion.usage),
    }
    return orjson.dumps(body)
