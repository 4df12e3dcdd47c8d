"""What the adapters' ``decode`` share: message text, tool arguments, the main session file,
and OpenAI Chat Completions messages (the claw agent's and mini-swe-agent's transcripts, and
the gateway's record of a rollout's calls) read into :class:`~openforge.tasks.transcript.Turn` s.

Each adapter decodes its own harness's form (``decode(raw) -> Transcript``) with these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from openforge.tasks.transcript import ToolUse, Turn

__all__ = [
    "arguments_of",
    "chat_turns",
    "main_session",
    "sessions_of",
    "text_of",
    "transcribed_error",
    "trimmed",
]

_ERROR_CHARS = 2000  # a harness's error message is kept to this many characters


def trimmed(error: Any) -> str:
    """A harness's error message, trimmed to what a result's ``error`` keeps."""
    return str(error)[:_ERROR_CHARS]


def transcribed_error(raw: Any) -> str | None:
    """The error a built-in agent wrote in its transcript when it stopped on one (trimmed)."""
    if isinstance(raw, Mapping) and raw.get("error"):
        return trimmed(raw["error"])
    return None


def text_of(content: Any) -> str:
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
                parts.append(text_of(p.get("content")))
        return "\n".join(parts)
    return ""


def arguments_of(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: a JSON string parsed, text kept under ``_raw``."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"_raw": raw}
        return parsed if isinstance(parsed, dict) else {"_raw": raw}
    return {}


def sessions_of(raw: Any) -> dict[str, list[Any]]:
    """The session files an adapter's collect read (``raw["sessions"]``), by path."""
    sessions = raw.get("sessions") if isinstance(raw, Mapping) else None
    if not isinstance(sessions, Mapping):
        return {}
    return {str(k): v for k, v in sessions.items() if isinstance(v, list)}


def main_session(sessions: Mapping[str, Sequence[Any]]) -> Sequence[Any]:
    """The longest session file (the agent's own; subagents and probes write shorter ones)."""
    best: Sequence[Any] = []
    for events in sessions.values():
        if len(events) > len(best):
            best = events
    return best


def chat_turns(messages: Any) -> tuple[Turn, ...]:
    """OpenAI Chat Completions messages as turns (other roles, and non-messages, skipped)."""
    out: list[Turn] = []
    names: dict[str, str] = {}
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "user":
            out.append(Turn("user", text_of(m.get("content"))))
        elif role == "assistant":
            uses = []
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                use = ToolUse(
                    str(call.get("id", "")),
                    str(fn.get("name", "")),
                    arguments_of(fn.get("arguments")),
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
            text = "\n".join([text_of(m.get("content")), *final]).strip()
            out.append(Turn("assistant", text, tuple(uses)))
        elif role == "tool":
            cid = str(m.get("tool_call_id", ""))
            out.append(
                Turn(
                    "tool", text_of(m.get("content")), tool_use_id=cid, tool_name=names.get(cid, "")
                )
            )
    return tuple(out)
