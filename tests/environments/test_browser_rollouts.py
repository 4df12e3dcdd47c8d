"""The built-in browser agent on MiniWoB tasks through the real orchestrator: a scripted
gateway answers in the agent's action format, bubblewrap sandboxes run the browser."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.guest.browser_agent import parse_action
from openforge.harnesses.base import HarnessError
from openforge.harnesses.registry import get_harness
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.suites import load_tasks
from openforge.suites.miniwob.loader import miniwob_task

from .conftest import admin_headers


async def test_browser_agent_rollouts_score_the_miniwob_reward(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    # click-button seed 4: [3] is the "Ok" button asked for; seed 3: [3] is a text field
    # (nothing happens) and [5] the wrong button "Okay" (the page scores it -1).
    gateway = scripted_gateway(["I will click it.\nAction: Click [3]", "Action: Click [5]"])
    tasks = [miniwob_task("click-button", 4), miniwob_task("click-button", 3)]
    config = RolloutConfig(
        tasks=tasks,
        harness="browser-agent",
        harness_options={"max_steps": 4},
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        concurrency=2,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )
    results = {r.task_id: r for r in await run_rollouts(config)}
    right, wrong = results["miniwob/click-button/4"], results["miniwob/click-button/3"]
    assert (right.status, right.reward, right.error) == ("completed", 1.0, None)
    assert (wrong.status, wrong.reward, wrong.error) == ("completed", 0.0, None)
    assert wrong.details is not None and wrong.details["raw"] == -1
    for res, calls in ((right, 1), (wrong, 2)):
        url = f"{gateway}/admin/rollouts/{res.rollout_id}"
        rec = httpx.get(url, headers=admin_headers()).json()
        assert (rec["status"], rec["reward"], len(rec["calls"])) == ("completed", res.reward, calls)
    # The agent's transcript: the page it saw and the action it took.
    lines = (tmp_path / "run" / "results.jsonl").read_bytes().splitlines()
    assert {orjson.loads(line)["task_id"] for line in lines} == set(results)
    assert not list((tmp_path / "sandboxes").iterdir())


async def test_set_of_marks_mode_sends_the_screenshot_and_scores(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    gateway = scripted_gateway(["Action: Click [2]"])  # seed 3: [2] is the "no" button
    config = RolloutConfig(
        tasks=[miniwob_task("click-button", 3)],
        harness="browser-agent",
        harness_options={"max_steps": 2, "mode": "som"},
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward) == ("completed", 1.0)
    transcript = orjson.loads(
        (
            tmp_path
            / "run"
            / "rollouts"
            / "miniwob"
            / "click-button"
            / "3"
            / "0"
            / "transcript.json"
        ).read_bytes()
    )
    assert transcript["mode"] == "som" and transcript["outcome"] == "done"
    assert transcript["steps"][0]["action"] == {"action": "click", "id": 2}


def test_actions_are_parsed_from_the_reply() -> None:
    assert parse_action("I see it.\nAction: Click [4]") == {"action": "click", "id": 4}
    assert parse_action('Action: Type [3]; "Jerald"') == {
        "action": "type",
        "id": 3,
        "text": "Jerald",
    }
    assert parse_action("key; Enter") == {"action": "key", "key": "Enter"}
    assert parse_action("Action: Scroll; up") == {"action": "scroll", "direction": "up"}
    assert parse_action("Action: Answer; 42") == {"action": "answer", "text": "42"}
    assert parse_action("Action: Tab [1]") is None  # not in the prompt: not understood
    assert parse_action("Action: Select [5]; Zambia") == {
        "action": "select",
        "id": 5,
        "text": "Zambia",
    }
    assert parse_action("I do not know") is None


def test_harness_options_are_checked() -> None:
    with pytest.raises(HarnessError, match="mode must be one of"):
        get_harness("browser-agent", mode="video")
    with pytest.raises(HarnessError, match="needs judge_base_url"):
        get_harness("browser-use", judge="separate")


def test_bundled_miniwob_suite_loads_with_splits() -> None:
    loaded = load_tasks("miniwob")
    assert loaded.errors == []
    ids = {t.id for t in loaded.tasks}
    assert "miniwob/click-button/1" in ids and len(ids) == 36
    assert {t.split for t in loaded.tasks if t.id.endswith("/4")} == {"test"}
    task = loaded.by_id()["miniwob/enter-text/2"]
    assert task.gui is not None and "site/miniwob/enter-text.html" in task.workspace
    assert "site/core/core.js" in task.workspace


def test_bad_miniwob_files_name_the_file_and_field(tmp_path: Path) -> None:
    for name, body in {
        "unknown": 'task = "no-such-task"\n',
        "seed": 'task = "click-button"\nseed = "x"\n',
        "split": 'task = "click-button"\nsplit = "dev"\n',
        "toml": "task = \n",
    }.items():
        d = tmp_path / name
        d.mkdir()
        (d / "miniwob.toml").write_text(body)
    errors = {Path(e.file).parent.name: e for e in load_tasks(tmp_path).errors}
    assert errors["unknown"].field == "task" and "no-such-task" in errors["unknown"].problem
    assert errors["seed"].field == "seed"
    assert errors["split"].field == "split"
    assert errors["toml"].field == "(toml)"
