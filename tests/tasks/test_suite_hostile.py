"""Hostile agents on the published suites' graders (ClawEval, QwenClawBench), through the
real orchestrator, gateway and bubblewrap sandboxes: forged evidence in the sandbox is not
read as the agent's doing, and what the agent breaks there ends as the grader's score of
what it really did, never as a higher one, never as ``infra_error``."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnesses.conftest import require
from openforge.harnesses.registry import get_harness
from openforge.probing.probe import probe, tool_reply
from openforge.suites import load_tasks

from .claweval_sample import write_sample as write_claweval
from .qcb_sample import write_sample as write_qcb

# ClawEval T001_notes: the tools the grader wants called, as lines of the bridge's log.
FORGED_DISPATCHES = (
    '{"tool_name": "notes_search", "request_body": {"query": "answer"}, '
    '"response_status": 200, "response_body": {}}\n'
    '{"tool_name": "notes_create", "request_body": {"title": "answer", "body": "42"}, '
    '"response_status": 200, "response_body": {}}\n'
    "not json at all\n"
)


async def test_claweval_forged_dispatches_and_a_removed_status_file(tmp_path: Path) -> None:
    """The agent appends the dispatches the grader wants to the bridge's log (and a line of
    garbage), deletes the services' status file and plants a link where a grader-only file
    goes; then it does nothing. It scores what a no-op scores."""
    require("claw")
    task = load_tasks(f"claweval:{write_claweval(tmp_path / 'ce')}").by_id()["T001_notes"]
    hostile = (
        f"printf %s {FORGED_DISPATCHES!r} >> /tmp/openforge-env/dispatches.jsonl; "
        "rm -f /tmp/openforge-env/status.json; "
        "rm -f fixtures/answer_key.txt; ln -s /etc/hostname fixtures/answer_key.txt; echo ok"
    )
    replies = [
        tool_reply("bash", command=hostile),
        tool_reply("submit", answer="I did nothing."),
    ]
    run = await probe(get_harness("claw"), replies, tmp_path / "run", task=task)
    assert run.result.status == "completed", (run.result, run.result.verifier_output)
    # The no-op's score: only the grader-only file's presence holds (completion 1/4).
    assert run.result.reward == pytest.approx(0.8 * 0.25 + 0.2 * 1.0), run.result.details


# What the notes service's audit would say had the agent created the note.
FORGED_AUDIT = '{"notes": {"url": "x", "data": {"created": [{"title": "answer", "body": "42"}]}}}'
# Write the audit, then kill the supervisor before its own write (and the harness with it).
KILL_SUPERVISOR = (
    "for p in /proc/[0-9]*; do grep -qa supervisor.py $p/cmdline 2>/dev/null && "
    "kill -9 ${p#/proc/}; done"
)


async def test_claweval_an_audit_the_supervisor_did_not_sign_counts_as_none(
    tmp_path: Path,
) -> None:
    """The agent writes the audit the grader wants and kills the supervisor so that its own
    audit never overwrites it: the forged audit is not the services' state."""
    require("claw")
    task = load_tasks(f"claweval:{write_claweval(tmp_path / 'ce')}").by_id()["T001_notes"]
    hostile = f"printf %s {FORGED_AUDIT!r} > /tmp/openforge-env/audit.json; {KILL_SUPERVISOR}"
    run = await probe(
        get_harness("claw"), [tool_reply("bash", command=hostile)], tmp_path / "run", task=task
    )
    assert run.result.status == "agent_error", (run.result, run.result.verifier_output)
    # As a no-op: only the grader-only file's presence holds (the forged note would add 1/4).
    assert run.result.reward == pytest.approx(0.8 * 0.25 + 0.2 * 1.0), run.result.details


async def test_qwenclawbench_links_out_of_the_workspace_are_not_a_crash(tmp_path: Path) -> None:
    """Links to host files and a link loop in the workspace: the grader copies the workspace
    without them and scores the run (a no-op's 0.5), instead of failing as infra."""
    require("claw")
    task = load_tasks(f"qwenclawbench:{write_qcb(tmp_path / 'qcb')}").by_id()["task_00001_answer"]
    hostile = "ln -s /etc/passwd leak.txt; ln -s loop loop; ln -s / root; echo ok"
    replies = [tool_reply("bash", command=hostile), tool_reply("submit", answer="nothing")]
    run = await probe(get_harness("claw"), replies, tmp_path / "run", task=task)
    assert (run.result.status, run.result.reward) == ("completed", 0.5), (
        run.result,
        run.result.verifier_output,
    )
