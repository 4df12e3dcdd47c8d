"""A rollout's transcript from the gateway's record of its calls, for graders and simulated
users.

Each recorded call holds the conversation as the harness sent it and the answer the engine
gave: the model's own words and tool calls exactly as generated, the tool results as the
harness returned them. A harness's session files live in the sandbox, where the agent can
rewrite them (a forged ``tool_use``, a final answer it never gave); the record it cannot.
So the final answer a harness states in its model's reply (Browser-Use's ``done`` text, the
browser agent's ``Answer``) is read here too, from the policy's last answered call, by the
harness adapter's own parser (:class:`~openforge.harnesses.base.StatesAnswer`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openforge.conversation import Completion, ToolCall
from openforge.harnesses.decoding import chat_turns, text_of
from openforge.tasks.transcript import Transcript

__all__ = ["RECORDED", "last_reply", "recorded_transcript"]

RECORDED = "gateway"  # Transcript.harness of a transcript read from the gateway's record
_POLICY = ("policy", "teacher")  # the roles that answer the harness itself


def _chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """A recorded canonical message (``conversation.Message`` as JSON) as an OpenAI Chat one."""
    out: dict[str, Any] = {"role": m.get("role"), "content": text_of(m.get("content"))}
    calls = m.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [
            {"id": c.get("id", ""), "function": {"name": c.get("name", ""),
                                                   "arguments": c.get("arguments", "")}}
            for c in calls
            if isinstance(c, dict)
        ]  # fmt: skip
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def last_reply(calls: list[dict[str, Any]]) -> Completion | None:
    """The policy's answer to its last call that the harness got whole (status ``ok``; in
    the admin listing's order, which is the calls'), as generated; None when there is none.

    A call that failed, was cut off or came after the rollout's finish gave the harness
    nothing it could act on, so it states nothing.
    """
    for call in reversed(calls):
        answer = call.get("completion")
        if call.get("role", "policy") not in _POLICY or call.get("status") != "ok":
            continue
        if not isinstance(answer, dict):
            return None
        tool_calls = [
            ToolCall(str(c.get("id", "")), str(c.get("name", "")), str(c.get("arguments", "")))
            for c in answer.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        return Completion(text=str(answer.get("text") or ""), tool_calls=tool_calls)
    return None


def recorded_transcript(
    calls: list[dict[str, Any]],
    stated_answer: Callable[[Completion], str | None] | None = None,
) -> Transcript | None:
    """The transcript of a rollout from the gateway's record of its calls (the admin API's
    ``content=1`` listing), its ``raw`` as OpenAI Chat messages (``{"messages": [...]}``),
    or None when the policy made no recorded call.

    The main conversation is the policy's longest (subagents and compacted branches send
    shorter ones), ending with the answer to its last call. ``answer`` is what
    ``stated_answer`` (the harness adapter's parser) reads in :func:`last_reply`; None
    without one.
    """
    best: dict[str, Any] | None = None
    for call in calls:
        conv = call.get("conversation")
        if call.get("role", "policy") not in _POLICY or not isinstance(conv, dict):
            continue
        size = len(conv.get("messages") or [])
        if best is None or size >= len(best["conversation"].get("messages") or []):
            best = call
    if best is None:
        return None
    messages = [
        _chat_message(m)
        for m in best["conversation"].get("messages") or []
        if isinstance(m, dict) and m.get("role") in ("user", "assistant", "tool")
    ]
    answer = best.get("completion") or {}
    if answer.get("text") or answer.get("tool_calls"):
        messages.append(
            _chat_message(
                {"role": "assistant", "content": answer.get("text") or "",
                 "tool_calls": answer.get("tool_calls") or []}
            )
        )  # fmt: skip
    reply = None if stated_answer is None else last_reply(calls)
    stated = None if reply is None or stated_answer is None else stated_answer(reply)
    return Transcript(RECORDED, chat_turns(messages), answer=stated, raw={"messages": messages})
