"""A harness's own transcript, read into one neutral list of turns and written out in the
forms published suites grade.

Each harness adapter's ``collect()`` returns its harness's own transcript: the built-in claw
agent its OpenAI Chat messages, OpenClaw its session JSONL, Claude Code its session JSONL of
Anthropic content blocks, Codex its session JSONL of Responses items. Suites grade one form:
QwenClawBench's graders read OpenClaw session events (``{"type": "message", "message":
{"role", "content": [{"type": "text" | "toolCall", …}]}}``, tool results as role
``toolResult``); ClawEval's graders read Anthropic-style ``text`` / ``tool_use`` /
``tool_result`` blocks. The turns here carry exactly what both need.

:func:`recorded_transcript` builds the transcript from the gateway's record of the rollout's
calls instead (each call's conversation as the harness sent it, and the answer the engine
gave): the model's own words and tool calls exactly as generated, the tool results as the
harness returned them. A harness's session files live in the sandbox, where the agent can
rewrite them (a forged ``tool_use``, a final answer it never gave); the record it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "ToolUse",
    "Turn",
    "claweval_messages",
    "openclaw_events",
    "recorded_transcript",
    "turns",
]


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call the model made."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(slots=True)
class Turn:
    """One message: the user's text, the assistant's text and tool calls, or a tool's result."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_uses: list[ToolUse] = field(default_factory=list)
    tool_use_id: str = ""
    tool_name: str = ""
    is_error: bool = False


def _text(content: Any) -> str:
    """The text of a message content: a string, or a list of text-bearing parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict) and p.get("type") == "tool_result":
                parts.append(_text(p.get("content")))
        return "\n".join(parts)
    return ""


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_raw": raw}
    return {}


def _from_chat(messages: list[Any]) -> list[Turn]:
    """OpenAI Chat Completions messages (the claw agent's transcript)."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "user":
            out.append(Turn("user", _text(m.get("content"))))
        elif role == "assistant":
            uses = []
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                use = ToolUse(
                    str(call.get("id", "")), str(fn.get("name", "")), _args(fn.get("arguments"))
                )
                names[use.id] = use.name
                uses.append(use)
            # The claw agent ends with submit(answer): its final answer, which the other
            # harnesses give as the last assistant text.
            final = [
                u.arguments["answer"]
                for u in uses
                if u.name == "submit" and isinstance(u.arguments.get("answer"), str)
            ]
            text = "\n".join([_text(m.get("content")), *final]).strip()
            out.append(Turn("assistant", text, uses))
        elif role == "tool":
            cid = str(m.get("tool_call_id", ""))
            out.append(
                Turn("tool", _text(m.get("content")), tool_use_id=cid, tool_name=names.get(cid, ""))
            )
    return out


def _from_openclaw(events: list[Any]) -> list[Turn]:
    """OpenClaw session events (``type: message``; roles user, assistant, toolResult)."""
    out: list[Turn] = []
    for e in events:
        msg = e.get("message") if isinstance(e, dict) and e.get("type") == "message" else None
        if not isinstance(msg, dict):
            continue
        role, content = msg.get("role"), msg.get("content")
        if role == "user":
            out.append(Turn("user", _text(content)))
        elif role == "assistant":
            uses = [
                ToolUse(str(p.get("id", "")), str(p.get("name", "")), _args(p.get("arguments")))
                for p in content or []
                if isinstance(p, dict) and p.get("type") == "toolCall"
            ]
            out.append(Turn("assistant", _text(content), uses))
        elif role == "toolResult":
            out.append(
                Turn(
                    "tool",
                    _text(content),
                    tool_use_id=str(msg.get("toolCallId", "")),
                    tool_name=str(msg.get("toolName", "")),
                    is_error=bool(msg.get("isError")),
                )
            )
    return out


def _from_anthropic(events: list[Any]) -> list[Turn]:
    """Claude Code session events (``type`` user/assistant with Anthropic content blocks)."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for e in events:
        msg = (
            e.get("message")
            if isinstance(e, dict) and e.get("type") in ("user", "assistant")
            else None
        )
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        blocks = (
            content if isinstance(content, list) else [{"type": "text", "text": _text(content)}]
        )
        if msg.get("role") == "assistant":
            uses = []
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    use = ToolUse(
                        str(b.get("id", "")), str(b.get("name", "")), _args(b.get("input"))
                    )
                    names[use.id] = use.name
                    uses.append(use)
            text = "\n".join(
                b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
            )
            out.append(Turn("assistant", text, uses))
            continue
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                cid = str(b.get("tool_use_id", ""))
                out.append(
                    Turn(
                        "tool",
                        _text(b.get("content")),
                        tool_use_id=cid,
                        tool_name=names.get(cid, ""),
                        is_error=bool(b.get("is_error")),
                    )
                )
            elif isinstance(b, dict) and b.get("type") == "text":
                out.append(Turn("user", str(b.get("text", ""))))
    return out


def _from_responses(events: list[Any]) -> list[Turn]:
    """Codex session events (``response_item`` payloads: message, function_call, …_output)."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for e in events:
        item = (
            e.get("payload") if isinstance(e, dict) and e.get("type") == "response_item" else None
        )
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message" and item.get("role") in ("user", "assistant"):
            out.append(Turn(item["role"], _text(item.get("content"))))
        elif kind == "function_call":
            use = ToolUse(
                str(item.get("call_id", "")),
                str(item.get("name", "")),
                _args(item.get("arguments")),
            )
            names[use.id] = use.name
            if out and out[-1].role == "assistant":
                out[-1].tool_uses.append(use)
            else:
                out.append(Turn("assistant", "", [use]))
        elif kind == "function_call_output":
            cid = str(item.get("call_id", ""))
            output = item.get("output")
            out.append(
                Turn(
                    "tool",
                    output if isinstance(output, str) else _text(output),
                    tool_use_id=cid,
                    tool_name=names.get(cid, ""),
                )
            )
    return out


def _chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """A recorded canonical message (``conversation.Message`` as JSON) as an OpenAI Chat one."""
    out: dict[str, Any] = {"role": m.get("role"), "content": _text(m.get("content"))}
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


def recorded_transcript(calls: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The transcript of a rollout from the gateway's record of its calls (the admin API's
    ``content=1`` listing), as OpenAI Chat messages (``{"messages": [...]}``), or None
    when the policy made no recorded call.

    The main conversation is the policy's longest (subagents and compacted branches send
    shorter ones), ending with the answer to its last call.
    """
    best: dict[str, Any] | None = None
    for call in calls:
        conv = call.get("conversation")
        if call.get("role", "policy") not in ("policy", "teacher") or not isinstance(conv, dict):
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
    return {"messages": messages}


def _main_session(sessions: dict[str, Any]) -> list[Any]:
    """The longest session file (the agent's own; subagents and probes write shorter ones)."""
    best: list[Any] = []
    for events in sessions.values():
        if isinstance(events, list) and len(events) > len(best):
            best = events
    return best


def turns(transcript: dict[str, Any] | None) -> list[Turn]:
    """The turns of any adapter's transcript; ``[]`` when the harness wrote none."""
    if not transcript:
        return []
    if isinstance(transcript.get("messages"), list):
        return _from_chat(transcript["messages"])
    events = _main_session(transcript.get("sessions") or {})
    for e in events:
        if isinstance(e, dict) and e.get("type") == "message":
            return _from_openclaw(events)
        if isinstance(e, dict) and e.get("type") == "response_item":
            return _from_responses(events)
        if isinstance(e, dict) and e.get("type") in ("user", "assistant"):
            return _from_anthropic(events)
    return []


def openclaw_events(items: list[Turn]) -> list[dict[str, Any]]:
    """The turns as OpenClaw session events, the transcript QwenClawBench's graders read."""
    out: list[dict[str, Any]] = []
    for t in items:
        if t.role == "tool":
            msg: dict[str, Any] = {
                "role": "toolResult",
                "toolCallId": t.tool_use_id,
                "toolName": t.tool_name,
                "content": [{"type": "text", "text": t.text}],
                "isError": t.is_error,
            }
        else:
            content: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
            content += [
                {"type": "toolCall", "id": u.id, "name": u.name, "arguments": u.arguments}
                for u in t.tool_uses
            ]
            msg = {"role": t.role, "content": content}
        out.append({"type": "message", "message": msg})
    return out


def claweval_messages(items: list[Turn]) -> list[dict[str, Any]]:
    """The turns as ClawEval ``Message`` objects (tool results ride in user messages)."""
    out: list[dict[str, Any]] = []
    for t in items:
        if t.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": t.tool_use_id,
                "content": [{"type": "text", "text": t.text}],
                "is_error": t.is_error,
            }
            out.append({"role": "user", "content": [block]})
            continue
        content: list[dict[str, Any]] = [{"type": "text", "text": t.text}] if t.text else []
        content += [
            {"type": "tool_use", "id": u.id, "name": u.name, "input": u.arguments}
            for u in t.tool_uses
        ]
        out.append({"role": t.role, "content": content})
    return out
