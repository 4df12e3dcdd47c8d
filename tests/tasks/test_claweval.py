"""ClawEval from a checkout: the loader reads the published task.yaml, the task's service
runs in the sandbox around a real harness, its tools reach the harness through the MCP
bridge, grader-only files stay out of the agent's sight, and the task's own grader class
scores the rebuilt trace."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from harnesses.conftest import require
from openforge.harnesses.registry import get_harness
from openforge.probing.probe import probe, tool_reply
from openforge.suites import load_tasks
from openforge.tasks.model import Task

from .claweval_sample import write_sample
from .judge import judge_endpoint

SOLVE = [
    tool_reply("bash", command="ls fixtures"),
    tool_reply("notes_search", query="answer"),
    tool_reply("notes_create", title="answer", body="42"),
    tool_reply("submit", answer="The answer is 42; I recorded it as a note."),
]


def _tasks(root: Path) -> dict[str, Task]:
    got = load_tasks(f"claweval:{root}")
    assert not got.errors, got.errors
    # The environments Python and a Node-free claw need room; the sample's own limits are none.
    return {t.id: dataclasses.replace(t, memory_mb=2048, pids=512) for t in got.tasks}


def test_the_published_layout_loads(tmp_path: Path) -> None:
    by = _tasks(write_sample(tmp_path / "ce"))
    task = by["T001_notes"]
    assert task.format == "claweval" and task.category == "productivity"
    assert task.split == "general" and by["T003_chat"].split == "multi_turn"
    assert task.instruction.startswith("Find the note titled answer")
    assert task.timeout_s == 200.0
    # The workspace has the sandbox file, never the grader-only one.
    assert set(task.workspace_bytes()) == {"fixtures/brief.txt"}
    assert task.mcp is not None
    assert [t.name for t in task.mcp.tools] == ["notes_search", "notes_create"]
    assert set(load_tasks(f"claweval:{tmp_path / 'ce'}", split="multi_turn").by_id()) == {
        "T003_chat"
    }


async def test_a_task_whose_service_searches_the_real_web_is_infra_error_offline(
    tmp_path: Path,
) -> None:
    """ClawEval's web_real service calls the real web: offline, its rollout is infra_error
    naming the reason (no agent runs), never the grader's score of a blind agent."""
    require("claw")
    root = write_sample(tmp_path / "ce")
    assert not any(t.wants_internet or t.needs_internet for t in _tasks(root).values())
    yaml_file = next(
        p for p in (root / "tasks").rglob("task.yaml") if "mock_services/" in p.read_text()
    )
    text = yaml_file.read_text()
    yaml_file.write_text(text.replace("mock_services/", "mock_services/web_real/../", 1))
    (task,) = [t for t in _tasks(root).values() if t.wants_internet]
    assert task.id == yaml_file.parent.name and "web_real" in (task.needs_internet or "")
    run = await probe(get_harness("claw"), SOLVE, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None), run.result
    assert "--allow-task-internet" in (run.result.error or "") and not run.calls


def test_a_missing_fixture_and_a_string_prompt_name_file_and_field(tmp_path: Path) -> None:
    root = write_sample(tmp_path / "ce")
    (root / "tasks/T002_broken/fixtures/brief.txt").unlink()
    yaml_file = root / "tasks/T003_chat/task.yaml"
    text = yaml_file.read_text().replace("prompt:\n  text:", "prompt:")
    yaml_file.write_text(text.replace("  language: en\n", ""))
    got = load_tasks(f"claweval:{root}")
    errors = {(Path(e.file).parent.name, e.field) for e in got.errors}
    assert errors == {("T002_broken", "sandbox_files[0]"), ("T003_chat", "prompt.text")}
    assert {t.id for t in got.tasks} == {"T001_notes", "T004_judged"}


def test_another_layout_fails_with_one_message(tmp_path: Path) -> None:
    (tmp_path / "tasks/T1").mkdir(parents=True)
    got = load_tasks(f"claweval:{tmp_path}")
    (err,) = got.errors
    assert err.file.endswith("src/claw_eval/graders/base.py") and "ClawEval" in err.problem


async def test_claw_uses_the_service_through_the_bridge_and_scores_1(tmp_path: Path) -> None:
    require("claw")
    task = _tasks(write_sample(tmp_path / "ce"))["T001_notes"]
    run = await probe(get_harness("claw"), SOLVE, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        run.result.verifier_output,
    )
    messages = json.loads((run.run_dir / "rollouts/T001_notes/0/transcript.json").read_text())
    observations = [m["content"] for m in messages["messages"] if m["role"] == "tool"]
    assert "brief.txt" in observations[0] and "answer_key" not in observations[0]
    assert '"body": "42"' in observations[1]  # the service's answer, through the bridge


async def test_a_no_op_scores_what_the_grader_gives(tmp_path: Path) -> None:
    require("claw")
    task = _tasks(write_sample(tmp_path / "ce"))["T001_notes"]
    replies = [tool_reply("submit", answer="I did nothing.")]
    run = await probe(get_harness("claw"), replies, tmp_path / "run", task=task)
    # Only the grader-only file's presence after the run holds: completion 1/4.
    assert run.result.status == "completed", run.result
    assert run.result.reward == pytest.approx(0.8 * 0.25 + 0.2 * 1.0)


@pytest.mark.parametrize(
    ("task_id", "why"),
    [("T002_broken", "no database"), ("T003_chat", "simulated user")],
)
async def test_a_failed_service_or_unsupported_split_is_infra_error(
    task_id: str, why: str, tmp_path: Path
) -> None:
    require("claw")
    task = _tasks(write_sample(tmp_path / "ce"))[task_id]
    run = await probe(get_harness("claw"), SOLVE, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None), run.result
    assert why in (run.result.error or ""), run.result.error


async def test_a_grader_that_needs_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    require("claw")
    monkeypatch.delenv("OPENFORGE_JUDGE_BASE_URL", raising=False)
    task = _tasks(write_sample(tmp_path / "ce"))["T004_judged"]
    with caplog.at_level(logging.WARNING, logger="openforge.rollouts"):
        run = await probe(get_harness("claw"), SOLVE, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("infra_error", None), run.result
    assert "needs an LLM judge" in (run.result.verifier_output or "")
    # The run said so before its first rollout, naming the option.
    assert any("--judge-engine" in r.getMessage() for r in caplog.records), caplog.text
    caplog.clear()
    async with judge_endpoint(tmp_path / "judge", '{"score": 0.5}', monkeypatch):
        with caplog.at_level(logging.WARNING, logger="openforge.rollouts"):
            run = await probe(get_harness("claw"), SOLVE, tmp_path / "run2", task=task)
        assert not any("--judge-engine" in r.getMessage() for r in caplog.records)
    assert run.result.status == "completed", (run.result, run.result.verifier_output)
    assert run.result.reward == pytest.approx(0.8 * 0.5 + 0.2)
    assert run.result.details["judge_calls"] == 1


async def test_claude_code_uses_the_tools_over_mcp_and_scores_1(tmp_path: Path) -> None:
    require("claude-code")
    task = _tasks(write_sample(tmp_path / "ce"))["T001_notes"]
    replies = [
        tool_reply("Bash", command="ls fixtures", description="List the fixtures"),
        tool_reply("mcp__task__notes_search", query="answer"),
        tool_reply("mcp__task__notes_create", title="answer", body="42"),
        {"text": "The answer is 42; I recorded it as a note."},
    ]
    run = await probe(get_harness("claude-code"), replies, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        run.result.verifier_output,
    )


CONSULT_POLICY = [{"text": "How much do you earn each month?"}, {"text": "Then save 10 a month."}]
# One scripted engine serves the judge and the user (--judge-engine only): the user's two
# replies come first, then the judge's verdict.
CONSULT_JUDGE = [
    {"text": "I earn 100 a month."},
    {"text": "Great, thanks. [DONE]"},
    {"text": '{"score": 0.9, "reasoning": "asked, then advised"}'},
]


async def test_multi_turn_talks_with_the_simulated_user_and_is_judged(tmp_path: Path) -> None:
    """ClawEval's protocol through claw: the agent answers without a tool, the simulated user
    (the suite's UserAgent, on the gateway's user-role key) replies with ``[user_agent]``, the
    agent continues its session, the user says [DONE], the grader judges the whole
    conversation through the judge-role key; every call is recorded with its role."""
    require("claw")
    task = _tasks(write_sample(tmp_path / "ce"))["T003_chat"]
    assert task.max_turns == 10 and task.simulated_user is not None
    assert task.simulated_user.max_rounds == 3
    assert task.workspace_bytes()["AGENTS.md"].startswith(b"Note: the user may not give")
    run = await probe(
        get_harness("claw"), CONSULT_POLICY, tmp_path / "run", task=task,
        judge_replies=CONSULT_JUDGE,
    )  # fmt: skip
    assert run.result.status == "completed", (run.result, run.result.verifier_output)
    assert run.result.reward == pytest.approx(0.8 * (0.9 + 1.0) / 2 + 0.2)
    assert run.result.details["judge_calls"] == 1
    assert [(c.seq, str(c.role)) for c in run.calls] == [
        (0, "policy"), (1, "user"), (2, "policy"), (3, "user"), (4, "judge"),
    ]  # fmt: skip
    # ClawEval's suffix reached claw's system prompt; the user's reply came as its runner
    # sends it, in the same session (the second policy call extends the first).
    first, second = run.calls[0], run.calls[2]
    system = first.conversation["messages"][0]["content"][0]["text"]
    assert "ask for what is missing" in system
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids and not second.fork
    said = [m["content"] for m in second.conversation["messages"] if m["role"] == "user"]
    assert said[-1][0]["text"] == "[user_agent]\nI earn 100 a month."
    asked = run.calls[1].conversation["messages"]
    assert "You earn 100 a month" in asked[0]["content"][0]["text"]  # the persona


async def test_a_failing_simulated_user_is_infra_error_at_once(tmp_path: Path) -> None:
    """The suite's UserAgent retries every failure for minutes and then ends the talk as if
    the user were satisfied; OpenForge stops at the first failed request: infra_error."""
    from openforge.harnesses.claw import ClawHarness
    from openforge.tasks.grading import VerifierError
    from openforge.tasks.judge import Judge

    task = _tasks(write_sample(tmp_path / "ce"))["T003_chat"]
    assert task.simulated_user is not None
    transcript = {"messages": [{"role": "user", "content": "How much should I save?"},
                               {"role": "assistant", "content": "What do you earn?"}]}  # fmt: skip
    nowhere = Judge("http://127.0.0.1:9/v1", "key", "user")  # nothing listens on port 9
    with pytest.raises(VerifierError) as err:
        await task.simulated_user.reply(ClawHarness.decode(transcript), nowhere)
    assert "exited with status 4" in str(err.value)
    assert "simulated user's model failed" in err.value.output


async def test_max_turns_caps_the_agents_model_calls(tmp_path: Path) -> None:
    require("claw")
    root = write_sample(tmp_path / "ce")
    yaml_file = root / "tasks/T001_notes/task.yaml"
    yaml_file.write_text(yaml_file.read_text().replace("max_turns: 10", "max_turns: 3"))
    task = _tasks(root)["T001_notes"]
    assert task.max_turns == 3
    # The agent would search forever; ClawEval's max_turns (not claw's own 8) stops it.
    replies = [tool_reply("notes_search", query="answer")]
    run = await probe(get_harness("claw"), replies, tmp_path / "run", task=task)
    assert len(run.calls) == 3, run.calls
    assert run.result.status == "agent_error" and run.result.reward is not None


async def test_multi_turn_under_claude_code_continues_its_session(tmp_path: Path) -> None:
    require("claude-code")
    task = _tasks(write_sample(tmp_path / "ce"))["T003_chat"]
    run = await probe(
        get_harness("claude-code"), CONSULT_POLICY, tmp_path / "run", task=task,
        judge_replies=CONSULT_JUDGE,
    )  # fmt: skip
    assert run.result.status == "completed", (run.result, run.result.verifier_output)
    assert [str(c.role) for c in run.calls] == ["policy", "user", "policy", "user", "judge"]
    said = [m for m in run.calls[2].conversation["messages"] if m["role"] == "user"]
    assert said[-1]["content"][-1]["text"] == "[user_agent]\nI earn 100 a month."
    assert run.result.reward == pytest.approx(0.8 * (0.9 + 1.0) / 2 + 0.2)


async def test_codex_uses_the_tools_over_mcp_and_scores_1(tmp_path: Path) -> None:
    """Codex sends the bridge's tools as the ``mcp__task`` namespace; the gateway serves
    them flat and answers with the namespace, so Codex calls its MCP server."""
    require("codex")
    task = _tasks(write_sample(tmp_path / "ce"))["T001_notes"]
    replies = [
        tool_reply("exec_command", cmd="ls fixtures"),
        tool_reply("mcp__task__notes_search", query="answer"),
        tool_reply("mcp__task__notes_create", title="answer", body="42"),
        {"text": "The answer is 42; I recorded it as a note."},
    ]
    run = await probe(get_harness("codex"), replies, tmp_path / "run", task=task)
    events = json.loads((run.run_dir / "rollouts/T001_notes/0/transcript.json").read_text())
    # On failure, what the grader scored and what Codex did (one CI run under load scored
    # 0.6; the details and items say which step it missed).
    items = [e["item"] for e in events["events"] if e.get("type") == "item.completed"]
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result.details,
        items,
    )
    mcp = [i for i in items if i["type"] == "mcp_tool_call"]
    assert [(i["server"], i["tool"], i["status"]) for i in mcp] == [
        ("task", "notes_search", "completed"),
        ("task", "notes_create", "completed"),
    ]
    assert '"body": "42"' in mcp[0]["result"]["content"][0]["text"]


async def test_openclaw_uses_the_tools_over_mcp_and_scores_1(tmp_path: Path) -> None:
    """OpenClaw starts the bridge from ``mcp.servers`` and, by its default Tool Search,
    keeps MCP tools behind ``tool_call`` with the tool's ``<server>__<tool>`` id."""
    require("openclaw")
    task = _tasks(write_sample(tmp_path / "ce"))["T001_notes"]
    replies = [
        tool_reply("exec", command="ls fixtures"),
        tool_reply("tool_call", id="task__notes_search", args={"query": "answer"}),
        tool_reply("tool_call", id="task__notes_create", args={"title": "answer", "body": "42"}),
        {"text": "The answer is 42; I recorded it as a note."},
    ]
    run = await probe(get_harness("openclaw"), replies, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        run.result.verifier_output,
    )
