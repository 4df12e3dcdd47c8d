"""Fingerprints: a re-run matches the stored baseline; an added tool is reported; the CLI
exits non-zero on a change; a missing or wrong-version harness names its install command."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from openforge.guest import claw_agent
from openforge.harnesses.base import HarnessNotInstalled
from openforge.harnesses.claude_code import ClaudeCodeHarness
from openforge.harnesses.claw import ClawHarness
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.fingerprint import (
    compare,
    fingerprint,
    load_fingerprint,
    stabilise,
)
from openforge.harnesses.launching import TaskTool
from openforge.probing.probe import SOLUTIONS, probe
from openforge.sandboxes import SandboxSpec, create_backend
from openforge.store.schemas import CallRecord, CallStatus

from .conftest import require

OPENFORGE = str(Path(sys.executable).parent / "openforge")
EXTRA_TOOL = (
    '    {"type": "function", "function": {"name": "grep", "description": "Search files.",'
    ' "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}},\n'
)


def _claw_with_extra_tool(tmp_path: Path) -> Path:
    source = Path(claw_agent.__file__).read_text()
    marker = "TOOLS: list[dict[str, Any]] = [\n"
    assert marker in source
    script = tmp_path / "claw_agent_plus.py"
    script.write_text(source.replace(marker, marker + EXTRA_TOOL, 1))
    return script


async def test_adding_a_tool_is_reported(tmp_path: Path) -> None:
    require("claw")
    baseline = load_fingerprint("claw", claw_agent.VERSION)
    assert baseline is not None
    harness = ClawHarness(script=_claw_with_extra_tool(tmp_path))
    run = await probe(harness, SOLUTIONS["claw"], tmp_path / "run")
    assert run.result.reward == 1.0, run.result
    fresh = fingerprint("claw", claw_agent.VERSION, run.calls)
    changes = compare(baseline, fresh)
    assert fresh["hash"] != baseline["hash"]
    assert "call 0: tool added: grep" in changes
    assert "call 1: tool added: grep" in changes
    assert not any("system prompt" in c for c in changes)


def test_check_cli_no_change_then_change(tmp_path: Path) -> None:
    require("claw")
    # A baseline whose first call lacked the `edit` tool: the installed claw "added" it.
    stored = load_fingerprint("claw", claw_agent.VERSION)
    assert stored is not None
    stored["calls"][0]["tools"] = [t for t in stored["calls"][0]["tools"] if t[0] != "edit"]
    stored["hash"] = "0" * 16
    (tmp_path / f"claw-{claw_agent.VERSION}.json").write_bytes(orjson.dumps(stored))
    # Both checks at once: each is a fresh CLI process (start-up is most of its time).
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv in (
            [OPENFORGE, "harness", "check", "claw"],
            [OPENFORGE, "harness", "check", "claw", "--baseline", str(tmp_path)],
        )
    ]
    (ok_out, ok_err), (changed_out, changed_err) = (p.communicate(timeout=240) for p in procs)
    assert procs[0].returncode == 0, ok_err
    assert "no change" in ok_out
    assert procs[1].returncode == 1, changed_err
    assert "call 0: tool added: edit" in changed_out


def test_stabilise_removes_dates_ids_and_kernels() -> None:
    text = (
        "Today's date is 2026-11-03. Session 327d749f-b4c1-414f-a675-caf6816056bf "
        "on Linux 6.8.0-45-generic, cwd /tmp/pytest-of-root/x1/work"
    )
    assert stabilise(text) == (
        "Today's date is <date>. Session <uuid> on Linux <kernel>, cwd <tmp>"
    )


@pytest.mark.parametrize(
    "make", [lambda b: ClaudeCodeHarness(binary=b), lambda b: CodexHarness(binary=b)]
)
async def test_missing_or_wrong_version_names_the_install_command(
    make: object, tmp_path: Path
) -> None:
    require("claw")
    backend = create_backend("local", root=tmp_path / "sb")
    box = await backend.create(SandboxSpec())
    try:
        await box.put({"fake": b"#!/bin/sh\necho '9.9.9 (fake)'\n"})
        await box.exec(["chmod", "+x", "fake"])
        for binary, expect in (
            ("no-such-harness", "is not installed"),
            ("/workspace/fake", "9.9.9 is installed but"),
        ):
            harness = make(binary)  # type: ignore[operator]
            with pytest.raises(HarnessNotInstalled) as err:
                await harness.check(box)
            assert expect in str(err.value)
            assert f"npm install -g {harness.install_command().split()[-1]}" in str(err.value)
    finally:
        await backend.close()


async def test_task_tools_reach_the_workspace_and_claws_prompt(tmp_path: Path) -> None:
    require("claw")
    backend = create_backend("local", root=tmp_path / "sb")
    box = await backend.create(SandboxSpec())
    tools = [TaskTool("lookup", "Look a word up.", "python3 tools/lookup.py WORD")]
    try:
        await ClawHarness().add_tools(box, tools)
        await CodexHarness().add_tools(box, tools)
        await ClaudeCodeHarness().add_tools(box, tools)
        got = await box.get(["AGENTS.md", "CLAUDE.md"])
        assert b"python3 tools/lookup.py WORD" in got["AGENTS.md"]
        assert got["AGENTS.md"] == got["CLAUDE.md"]
    finally:
        await backend.close()
    (tmp_path / "AGENTS.md").write_bytes(got["AGENTS.md"])
    prompt = claw_agent.system_prompt(tmp_path)
    assert prompt.startswith(claw_agent.SYSTEM_PROMPT) and "## lookup" in prompt


def test_stabilise_drops_the_host_os_from_a_user_agent_but_not_the_version() -> None:
    here = "codex_exec/0.171.0 (Debian 12.0.0; x86_64) unknown (codex_exec; 0.171.0)"
    there = "codex_exec/0.171.0 (Ubuntu 24.04; x86_64) unknown (codex_exec; 0.171.0)"
    newer = "codex_exec/0.172.0 (Debian 12.0.0; x86_64) unknown (codex_exec; 0.172.0)"
    assert stabilise(here) == stabilise(there)
    assert stabilise(here) == "codex_exec/0.171.0 (<os>; x86_64) unknown (codex_exec; 0.171.0)"
    assert stabilise(newer) != stabilise(here)
    assert stabilise("claude-cli/2.1.197 (external, sdk-cli)") == (
        "claude-cli/2.1.197 (external, sdk-cli)"
    )


# The shared fixtures lie beside the checkout (../shared); the repo keeps its own copy too.
_FIXTURE_DIRS = (
    Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "harness-requests",
    Path(__file__).resolve().parents[1] / "dialects" / "fixtures",
)
# The date each recorded body was made on, as the harness printed it.
_RECORDED = datetime.date(2026, 11, 30)


def _date_forms(day: datetime.date) -> list[str]:
    """``day`` in every form harnesses print a date in (the fixtures use the first two)."""
    return [
        day.isoformat(),
        f"{day:%B} {day.year}",
        f"{day:%B} {day.day}, {day.year}",
        f"{day.day} {day:%B} {day.year}",
        f"{day:%A}, {day:%B} {day.day}, {day.year}",
        f"{day:%a}, {day:%d} {day:%b} {day.year} 17:24:50 GMT",
        f"{day:%m}/{day:%d}/{day.year}",
        f"{day:%d}.{day:%m}.{day.year}",
        f"{day:%b} {day.day}, {day.year} at 9:05 PM",
        f"{day.isoformat()}T17:24:50.123Z",
    ]


def _fixture_call(name: str, text: str) -> CallRecord:
    dialect = "anthropic" if ".messages." in name else "openai_responses"
    return CallRecord(
        id="c", rollout_id="r", seq=0, dialect=dialect, status=CallStatus.OK,
        raw_request=text.encode(), harness={"user-agent": "probe"},
    )  # fmt: skip


def _with_forms(text: str, day: datetime.date) -> str:
    """The recorded body with every date form of the recording day at its end of text, and
    the recorded dates replaced by ``day``'s."""
    old, new = _date_forms(_RECORDED), _date_forms(day)
    for o, n in zip(old[:2], new[:2], strict=True):
        assert o in text or o == old[1]  # the fixtures hold the ISO date; Claude Code the month
        text = text.replace(o, n)
    # Every other form, inside the system text where a harness would print it.
    extra = " ".join(new[2:]) + " 3 days ago, in 5 minutes"
    return text.replace("Today's date is", f"{extra}. Today's date is", 1).replace(
        "<current_date>", f"<current_date>{extra} ", 1
    )


@pytest.mark.parametrize(
    "name",
    ["claude-code-2.1.197.messages.first-call.json", "codex-0.171.0.responses.first-call.json"],
)
@pytest.mark.parametrize(
    "day",
    [datetime.date(2026, 12, 1), datetime.date(2027, 2, 28), datetime.date(2031, 5, 4),
     datetime.date(2026, 9, 9)],
)  # fmt: skip
def test_fingerprint_of_a_recorded_body_does_not_change_with_the_date(
    name: str, day: datetime.date
) -> None:
    path = next((d / name for d in _FIXTURE_DIRS if (d / name).is_file()), None)
    assert path is not None, f"recorded fixture {name} is in none of {_FIXTURE_DIRS}"
    text = path.read_text()
    assert _RECORDED.isoformat() in text
    base = fingerprint("h", "1", [_fixture_call(name, _with_forms(text, _RECORDED))])
    other = fingerprint("h", "1", [_fixture_call(name, _with_forms(text, day))])
    assert other["hash"] == base["hash"], compare(base, other)
    # And the forms really were there: without normalising, the text differs.
    assert _with_forms(text, day) != _with_forms(text, _RECORDED)


@given(
    st.dates(datetime.date(1990, 1, 1), datetime.date(2099, 12, 31)),
    st.dates(datetime.date(1990, 1, 1), datetime.date(2099, 12, 31)),
    st.integers(0, 9),
)
def test_every_date_form_stabilises_alike(a: datetime.date, b: datetime.date, form: int) -> None:
    line = "Context: the date is {}. The rest stays."
    assert stabilise(line.format(_date_forms(a)[form])) == stabilise(
        line.format(_date_forms(b)[form])
    )
    assert "The rest stays." in stabilise(line.format(_date_forms(a)[form]))


def test_stabilise_leaves_words_that_only_look_like_dates() -> None:
    text = "May I help? Sun shines. version 1.2.3, claude-haiku-4-5-20251001, cron 30 14 * * *"
    assert stabilise(text) == text
