"""Each adapter's ``decode``: the harness's own transcript, as ``collect`` reads it, into the
typed :class:`Transcript` graders, simulated users and the monitor read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from openforge.harnesses.base import HarnessError
from openforge.harnesses.browser import BrowserAgentHarness
from openforge.harnesses.browser_use import BrowserUseHarness
from openforge.harnesses.claude_code import ClaudeCodeHarness
from openforge.harnesses.claw import ClawHarness
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.mini_swe_agent import MiniSweAgentHarness
from openforge.harnesses.openclaw import OpenClawHarness
from openforge.harnesses.registry import decode_transcript
from openforge.harnesses.shell import ShellHarness
from openforge.rollouts.recorded import recorded_transcript
from openforge.tasks.transcript import ToolUse, Transcript, Turn


def _call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_claw_messages_become_turns_and_submit_is_the_answer() -> None:
    raw = {
        "outcome": "error",
        "error": "model API: HTTP 400 " + "x" * 3000,
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Write hello.txt"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call("c1", "bash", '{"command": "echo hi > hello.txt"}')],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_call("c2", "submit", '{"answer": "done"}'), _call("c3", "x", "{")],
            },
        ],
    }
    t = ClawHarness.decode(raw)
    assert t.harness == "claw" and t.raw is raw and t.answer is None
    assert t.turns == (
        Turn("user", "Write hello.txt"),
        Turn("assistant", "", (ToolUse("c1", "bash", {"command": "echo hi > hello.txt"}),)),
        Turn("tool", "ok", tool_use_id="c1", tool_name="bash"),
        Turn(
            "assistant",
            "done",
            (ToolUse("c2", "submit", {"answer": "done"}), ToolUse("c3", "x", {"_raw": "{"})),
        ),
    )
    assert (
        t.error is not None and t.error.startswith("model API: HTTP 400") and len(t.error) == 2000
    )
    # A transcript torn mid-write is kept, with nothing decoded from it.
    torn = ClawHarness.decode({"unparsed": '{"messages": ['})
    assert torn.turns == () and torn.error is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.error = None  # type: ignore[misc]


def test_mini_swe_agent_gives_the_exception_it_stopped_on() -> None:
    def raw(status: str) -> dict[str, Any]:
        return {
            "info": {"exit_status": status},
            "messages": [
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "THOUGHT: look\n```bash\nls\n```"},
                {"role": "exit", "content": "prompt is too long"},
            ],
        }

    t = MiniSweAgentHarness.decode(raw("ContextWindowExceededError"))
    assert t.error == "ContextWindowExceededError: prompt is too long"
    assert [(x.role, x.text[:8]) for x in t.turns] == [
        ("user", "fix it"),
        ("assistant", "THOUGHT:"),
    ]
    assert MiniSweAgentHarness.decode(raw("Submitted")).error is None


def test_openclaw_reads_its_longest_session_and_its_json_error() -> None:
    main = [
        {"type": "session", "id": "s"},
        {
            "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": "go"}]},
        },
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "reading"},
                    {
                        "type": "toolCall",
                        "id": "t1",
                        "name": "read",
                        "arguments": {"path": "a.txt"},
                    },
                ],
            },
        },
        {
            "type": "message",
            "message": {
                "role": "toolResult",
                "toolCallId": "t1",
                "toolName": "read",
                "isError": True,
                "content": [{"type": "text", "text": "ENOENT"}],
            },
        },
    ]
    probe = [{"type": "message", "message": {"role": "user", "content": "hi"}}]
    raw = {
        "output": {"payloads": [{"isError": True, "text": "Context overflow: prompt too large"}]},
        "sessions": {"/h/.openclaw/agents/main/sessions/s.jsonl": main, "/h/probe.jsonl": probe},
    }
    t = OpenClawHarness.decode(raw)
    assert t.error == "Context overflow: prompt too large"
    assert t.sessions == raw["sessions"]
    assert t.turns == (
        Turn("user", "go"),
        Turn("assistant", "reading", (ToolUse("t1", "read", {"path": "a.txt"}),)),
        Turn("tool", "ENOENT", tool_use_id="t1", tool_name="read", is_error=True),
    )
    error = OpenClawHarness.decode({"output": {"error": {"message": "Unknown model"}}})
    assert error.error == "Unknown model" and error.turns == () and error.sessions == {}


def test_claude_code_reads_anthropic_blocks_and_its_result_error() -> None:
    session = [
        {"type": "user", "message": {"role": "user", "content": "count lines"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me see."},
                    {
                        "type": "tool_use",
                        "id": "u1",
                        "name": "Bash",
                        "input": {"command": "wc -l f"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "u1",
                        "content": [{"type": "text", "text": "3 f"}],
                    }
                ],
            },
        },
    ]
    result = {
        "type": "result",
        "is_error": True,
        "subtype": "success",
        "terminal_reason": "prompt_too_long",
        "api_error_status": 400,
        "result": "Prompt is too long",
    }
    t = ClaudeCodeHarness.decode({"events": [result], "result": result, "sessions": {"s": session}})
    assert t.harness == "claude-code"
    assert t.error == "prompt_too_long, HTTP 400: Prompt is too long"
    assert t.turns == (
        Turn("user", "count lines"),
        Turn("assistant", "Let me see.", (ToolUse("u1", "Bash", {"command": "wc -l f"}),)),
        Turn("tool", "3 f", tool_use_id="u1", tool_name="Bash"),
    )
    fine = dict(result, is_error=False)
    assert ClaudeCodeHarness.decode({"events": [], "result": fine, "sessions": {}}).error is None


def test_codex_joins_calls_to_the_assistant_turn_and_reports_turn_failed() -> None:
    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    session = [
        {"type": "session_meta", "payload": {}},
        item(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
        ),
        item(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "running"}],
            }
        ),
        item(
            {
                "type": "function_call",
                "call_id": "f1",
                "name": "shell",
                "arguments": '{"command": ["ls"]}',
            }
        ),
        item({"type": "function_call_output", "call_id": "f1", "output": "a.txt"}),
    ]
    events = [
        {"type": "error", "message": "reconnecting"},
        {"type": "turn.failed", "error": {"message": "stream disconnected"}},
    ]
    t = CodexHarness.decode({"events": events, "sessions": {"s": session}})
    assert t.error == "stream disconnected"
    assert t.turns == (
        Turn("user", "go"),
        Turn("assistant", "running", (ToolUse("f1", "shell", {"command": ["ls"]}),)),
        Turn("tool", "a.txt", tool_use_id="f1", tool_name="shell"),
    )


def test_gui_agents_keep_their_steps_raw_and_browser_use_states_its_answer() -> None:
    steps = {"outcome": "error", "error": "environment gone", "steps": [{"reply": "x"}]}
    t = BrowserAgentHarness.decode(steps)
    assert (t.harness, t.turns, t.error, t.raw) == ("browser-agent", (), "environment gone", steps)
    history = {
        "history": [
            {"result": [{"is_done": False}]},
            {"result": [{"is_done": True, "extracted_content": "8443"}]},
        ]
    }
    assert BrowserUseHarness.decode(history).answer == "8443"
    assert BrowserUseHarness.decode({"history": []}).answer is None
    assert ShellHarness.decode(None) == Transcript("shell")


def test_a_run_dirs_transcript_is_decoded_by_the_adapter_its_run_names() -> None:
    raw = {"messages": [{"role": "user", "content": "hi"}]}
    assert decode_transcript("claw", raw) == ClawHarness.decode(raw)
    assert decode_transcript("browser-agent", {"error": "e"}).error == "e"
    with pytest.raises(HarnessError, match="unknown harness"):
        decode_transcript("nope", raw)


def test_the_recorded_transcript_is_the_policys_longest_conversation_and_its_answer() -> None:
    def call(role: str, messages: list[dict[str, Any]], text: str = "") -> dict[str, Any]:
        return {
            "role": role,
            "conversation": {"messages": messages},
            "completion": {"text": text, "tool_calls": []},
        }

    user = {"role": "user", "content": [{"type": "text", "text": "task"}]}
    asked = {
        "role": "assistant",
        "content": [],
        "tool_calls": [{"id": "c", "name": "bash", "arguments": '{"command": "ls"}'}],
    }
    result = {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a"}]}
    calls = [
        call("policy", [user], ""),
        call("policy", [{"role": "system", "content": "sys"}, user, asked, result], "done"),
        call("judge", [user, user, user, user, user, user], "Status: success"),
    ]
    t = recorded_transcript(calls)
    assert t is not None and t.harness == "gateway"
    assert t.turns == (
        Turn("user", "task"),
        Turn("assistant", "", (ToolUse("c", "bash", {"command": "ls"}),)),
        Turn("tool", "a", tool_use_id="c", tool_name="bash"),
        Turn("assistant", "done"),
    )
    assert recorded_transcript([calls[2]]) is None
