"""One run as its harness recorded it: the typed seam where harnesses meet tasks.

Each harness writes its own transcript (the built-in claw agent OpenAI Chat messages,
OpenClaw its session JSONL, Claude Code Anthropic content blocks, Codex Responses items).
The harness's adapter decodes that into a :class:`Transcript` (``Harness.collect``); graders,
simulated users and the reward-hack monitor read only this. ``raw`` keeps what the adapter
read, unchanged, for the run directory's ``transcript.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ToolUse", "Transcript", "Turn"]


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call the model made."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message: the user's text, the assistant's text and tool calls, or a tool's result."""

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_uses: tuple[ToolUse, ...] = ()
    tool_use_id: str = ""
    tool_name: str = ""
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Transcript:
    """One run as its harness recorded it, decoded by the harness's adapter."""

    harness: str  # the adapter's name ("gateway" for the gateway's record of the calls)
    turns: tuple[Turn, ...] = ()  # user text, assistant text + tool uses, tool results
    answer: str | None = None  # a final answer stated apart (Browser-Use's ``done`` text)
    error: str | None = None  # the harness's own error when it stopped on one
    # Session files as the harness wrote them, by path (QwenClawBench passes OpenClaw's own).
    sessions: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    raw: Any = None  # what collect read; written unchanged to the run dir's transcript.json
