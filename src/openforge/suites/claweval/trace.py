"""The trace ClawEval's runner writes for one run (``claw_eval.models.trace``), rebuilt from an
OpenForge rollout for ClawEval's own graders.

The transcript is the gateway's record of the rollout's calls (the runner's), and a tool
dispatch the MCP bridge logged counts only when it answers a tool call the model made: the
log is a file in the sandbox, which the agent could append to.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import Any

from openforge.tasks.transcript import Turn

__all__ = ["build_trace", "claweval_messages", "file_entry", "made_by_the_model"]


def claweval_messages(items: Sequence[Turn]) -> list[dict[str, Any]]:
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


def file_entry(data: bytes) -> dict[str, Any]:
    """A file as ClawEval's sandbox ``/read`` answers: UTF-8 text, else base64."""
    try:
        return {"content": data.decode("utf-8"), "encoding": "utf-8", "mime_type": "text/plain"}
    except UnicodeDecodeError:
        return {
            "content": base64.b64encode(data).decode("ascii"),
            "encoding": "base64",
            "mime_type": "application/octet-stream",
            "size_bytes": len(data),
        }


def _link_dispatches(messages: list[dict[str, Any]], dispatches: list[dict[str, Any]]) -> None:
    """Give each logged dispatch the id of the model's call it served (same tool, in order).

    The bridge sees calls, not the model's tool-use ids; ClawEval's dispatcher records them.
    """
    uses = [
        b
        for m in messages
        if m.get("role") == "assistant"
        for b in m.get("content", [])
        if b.get("type") == "tool_use"
    ]
    taken: set[int] = set()
    for d in dispatches:
        for i, b in enumerate(uses):
            if i not in taken and b.get("name") == d.get("tool_name"):
                d["tool_use_id"] = b.get("id", d.get("tool_use_id"))
                taken.add(i)
                break


def _same_tool(model_name: str, tool: str) -> bool:
    """Whether the model's tool name is the task tool ``tool`` (harnesses prefix MCP tools:
    ``mcp__task__send``, ``task.send``)."""
    if model_name == tool:
        return True
    return model_name.endswith(tool) and model_name[-len(tool) - 1] in "_.:/-"


def _unwrapped(name: str, arguments: Any) -> tuple[str, Any]:
    """The tool a call really names: OpenClaw's Tool Search keeps MCP tools behind one
    ``tool_call`` tool (``{"id": "<server>__<tool>", "args": {...}}``)."""
    if name == "tool_call" and isinstance(arguments, dict) and isinstance(arguments.get("id"), str):
        return arguments["id"], arguments.get("args") or {}
    return name, arguments


def made_by_the_model(
    messages: list[dict[str, Any]], dispatches: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The logged dispatches that answer a tool call the model made (same tool, same
    arguments; each call answers one dispatch). The log lives in the sandbox, where the
    agent can append lines; the model's calls come from the gateway's record."""
    uses = [
        b
        for m in messages
        if m.get("role") == "assistant"
        for b in m.get("content", [])
        if b.get("type") == "tool_use"
    ]
    calls = [_unwrapped(str(b.get("name", "")), b.get("input")) for b in uses]
    taken: set[int] = set()
    kept = []
    for d in dispatches:
        for i, (name, arguments) in enumerate(calls):
            if (
                i not in taken
                and _same_tool(name, str(d.get("tool_name", "")))
                and arguments == d.get("request_body")
            ):
                taken.add(i)
                kept.append(d)
                break
    return kept


def build_trace(
    task_id: str,
    messages: list[dict[str, Any]],
    dispatches: list[dict[str, Any]],
    audits: dict[str, Any],
) -> list[dict[str, Any]]:
    """The JSONL events ClawEval's runner writes for one run (``claw_eval.models.trace``)."""
    trace_id = f"openforge-{task_id}-{int(time.time() * 1000)}"
    _link_dispatches(messages, dispatches)
    events: list[dict[str, Any]] = [
        {"type": "trace_start", "trace_id": trace_id, "task_id": task_id, "model": "openforge"}
    ]
    events += [{"type": "message", "trace_id": trace_id, "message": m} for m in messages]
    for d in dispatches:
        events.append({"type": "tool_dispatch", "trace_id": trace_id, **d})
    for name, data in audits.items():
        events.append(
            {
                "type": "audit_snapshot",
                "trace_id": trace_id,
                "service_name": name,
                "audit_url": str(data.get("url", "")) if isinstance(data, dict) else "",
                "audit_data": data.get("data", {}) if isinstance(data, dict) else {},
            }
        )
    turns_n = sum(1 for m in messages if m.get("role") == "assistant")
    events.append({"type": "trace_end", "trace_id": trace_id, "total_turns": turns_n})
    return events
