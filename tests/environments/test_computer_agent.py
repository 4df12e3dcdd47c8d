"""The built-in computer-use agent through the real orchestrator and gateway on an
OSWorld-format task (written here in OSWorld's layout): a scripted engine calls its
``computer`` (PyAutoGUI), ``bash`` and ``str_replace_editor`` tools; the task's own
evaluator scores the file the agent left."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest

from gateway_process import Reply
from openforge.guest.computer_agent import edit_file
from openforge.harnesses.base import HarnessError
from openforge.harnesses.registry import get_harness
from openforge.rollouts import RolloutConfig, RolloutResult, run_rollouts
from openforge.suites import load_tasks

from .conftest import admin_headers
from .test_desktop import EDIT_ID, NOTES, _suite

Gateway = Callable[[Sequence[Reply]], str]


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def _rollout(tmp_path: Path, gateway: str) -> tuple[RolloutResult, dict[str, object]]:
    task = load_tasks(_suite(tmp_path)).by_id()[f"osworld/os/{EDIT_ID}"]
    config = RolloutConfig(
        tasks=[task],
        harness="computer-agent",
        harness_options={"max_steps": 5},
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )
    (res,) = await run_rollouts(config)
    run = tmp_path / "run" / "rollouts" / "osworld" / "os" / EDIT_ID / "0" / "transcript.json"
    return res, json.loads(run.read_text())


async def test_pyautogui_and_bash_complete_an_osworld_task(
    scripted_gateway: Gateway, tmp_path: Path
) -> None:
    # Mousepad opens notes.txt (the task's config): wait for its window (bash, xdotool),
    # type and save (PyAutoGUI), wait for the saved text and look (bash), say DONE.
    wait_window = (
        "timeout 60 xdotool search --sync --onlyvisible --name notes windowactivate --sync"
    )
    typed = "pyautogui.typewrite('hello desktop'); pyautogui.hotkey('ctrl', 's')"
    look = f"for i in $(seq 100); do grep -q hello {NOTES} && break; sleep 0.2; done; cat {NOTES}"
    gateway = scripted_gateway(
        [
            _call("bash", command=wait_window),
            _call("computer", code=typed),
            _call("bash", command=look),
            _call("computer", code="DONE"),
        ]
    )
    res, transcript = await _rollout(tmp_path, gateway)
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    steps = transcript["steps"]
    assert isinstance(steps, list)
    assert [s["tool"] for s in steps] == ["bash", "computer", "bash", "computer"]
    assert steps[0]["result"].startswith("exit status 0")
    assert steps[1]["result"] == "status: running"
    assert steps[2]["result"] == "exit status 0\nhello desktop"
    assert transcript["outcome"] == "done"
    rec = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers()).json()
    calls = rec["calls"]
    # A screenshot before the first step and after each step; only the last 3 are kept, so
    # the fourth call drops the first from message 2 (a fork, with its reason; a text-only
    # model's record cannot tell a dropped placeholder from an edit).
    assert [c["render_info"].get("images_omitted") for c in calls] == [1, 2, 3, 3]
    assert [bool(c["fork"]) for c in calls] == [False, False, False, True]
    assert calls[3]["render_info"]["fork_reason"].startswith("message 2 (user)")
    assert not list((tmp_path / "sandboxes").iterdir())


async def test_the_file_editor_writes_what_the_evaluator_reads(
    scripted_gateway: Gateway, tmp_path: Path
) -> None:
    for text, reward in (("hello desktop", 1.0), ("goodbye", 0.0)):
        gateway = scripted_gateway(
            [
                _call("str_replace_editor", command="create", path=NOTES, file_text=text),
                _call("computer", code="DONE"),
            ]
        )
        res, transcript = await _rollout(tmp_path / text.replace(" ", "-"), gateway)
        assert (res.status, res.reward) == ("completed", reward), res
        steps = transcript["steps"]
        assert isinstance(steps, list) and steps[0]["result"] == f"created {NOTES}"


def test_the_editor_commands(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    assert edit_file({"command": "create", "path": str(f), "file_text": "one\ntwo\n"}).startswith(
        "created"
    )
    assert edit_file({"command": "str_replace", "path": str(f), "old_str": "two", "new_str": "2"})
    assert f.read_text() == "one\n2\n"
    assert "occurs 0 times" in edit_file(
        {"command": "str_replace", "path": str(f), "old_str": "zzz", "new_str": "y"}
    )
    edit_file({"command": "insert", "path": str(f), "insert_line": 1, "new_str": "1.5"})
    assert f.read_text() == "one\n1.5\n2\n"
    assert edit_file({"command": "view", "path": str(f)}).splitlines()[1] == "     2\t1.5"
    assert edit_file({"command": "view", "path": "rel.txt"}).startswith("error: path must be")
    assert "unknown command" in edit_file({"command": "delete", "path": str(f)})


def test_harness_options_are_checked() -> None:
    with pytest.raises(HarnessError, match="keep_screenshots"):
        get_harness("computer-agent", keep_screenshots=0)
