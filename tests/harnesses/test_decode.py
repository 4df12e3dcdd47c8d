"""Each adapter's ``decode``: the harness's own transcript, as ``collect`` reads it, into the
typed :class:`Transcript` graders, simulated users and the monitor read."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from openforge.conversation import Completion, ToolCall
from openforge.harnesses.base import HarnessError, StatesAnswer
from openforge.harnesses.browser import BrowserAgentHarness
from openforge.harnesses.browser_use import BrowserUseHarness
from openforge.harnesses.claude_code import ClaudeCodeHarness
from openforge.harnesses.claw import ClawHarness
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.mini_swe_agent import MiniSweAgentHarness
from openforge.harnesses.openclaw import OpenClawHarness
from openforge.harnesses.registry import decode_transcript
from openforge.harnesses.shell import ShellHarness
from openforge.rollouts.recorded import last_reply, recorded_transcript
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


def _recorded(
    text: str, role: str = "policy", status: str = "ok", tool_calls: list[Any] | None = None
) -> dict[str, Any]:
    """One call as the admin API lists it with ``content=1``."""
    user = {"role": "user", "content": [{"type": "text", "text": "Which port?"}]}
    return {
        "role": role,
        "status": status,
        "conversation": {"messages": [{"role": "system", "content": "sys"}, user]},
        "completion": {"text": text, "tool_calls": tool_calls or []},
    }


def _agent_output(*actions: dict[str, Any]) -> str:
    return json.dumps({"memory": "m", "next_goal": "g", "action": list(actions)})


def test_the_answer_is_read_from_the_policys_last_answered_call() -> None:
    agent = BrowserAgentHarness()
    assert isinstance(agent, StatesAnswer) and isinstance(BrowserUseHarness(), StatesAnswer)
    assert not isinstance(ClawHarness(), StatesAnswer)
    calls = [
        _recorded("Action: Click [3]"),
        _recorded("Thinking.\nAction: Answer; 8443"),
        _recorded("Action: Answer; 80", status="engine_error"),  # the harness got an error
        _recorded("Status: failure", role="judge"),  # the grader's judge, not the agent
    ]
    reply = last_reply(calls)
    assert reply is not None and reply.text == "Thinking.\nAction: Answer; 8443"
    t = recorded_transcript(calls, agent.stated_answer)
    assert t is not None and t.harness == "gateway" and t.answer == "8443"
    # Without the harness's parser, and when the last answered call is an action, no answer.
    unparsed = recorded_transcript(calls)
    assert unparsed is not None and unparsed.answer is None
    acted = recorded_transcript([*calls, _recorded("Action: Back")], agent.stated_answer)
    assert acted is not None and acted.answer is None
    assert last_reply([_recorded("Action: Answer; 1", status="late")]) is None
    # A teacher answers the harness too; its tool calls come back typed.
    call = _recorded(
        "", role="teacher", tool_calls=[{"id": "c", "name": "done", "arguments": "{}"}]
    )
    assert last_reply([call]) == Completion(text="", tool_calls=[ToolCall("c", "done", "{}")])


def test_browser_use_states_the_text_of_a_done_it_runs() -> None:
    bu = BrowserUseHarness()
    done = {"done": {"text": "The port is 8443.", "success": True}}
    said = recorded_transcript(
        [_recorded(_agent_output({"click": {"index": 4}})), _recorded(_agent_output(done))],
        bu.stated_answer,
    )
    assert said is not None and said.answer == "The port is 8443."

    def stated(text: str, calls: list[Any] | None = None) -> str | None:
        return bu.stated_answer(Completion(text=text, tool_calls=calls or []))

    # Browser-Use runs ``done`` only as a step's first action, and reads only the message's
    # JSON content: a later ``done``, prose, a fenced block or a tool call states nothing.
    assert stated(_agent_output({"scroll": {"down": True}}, done)) is None
    assert stated("The port is 8443.") is None
    assert stated("```json\n" + _agent_output(done) + "\n```") is None
    assert stated("", [ToolCall("c", "done", json.dumps(done["done"]))]) is None
    assert stated(_agent_output({"done": {"text": 8443}})) is None
    assert stated(json.dumps([done])) is None
