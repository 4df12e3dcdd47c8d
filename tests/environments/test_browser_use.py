"""Browser-Use, unmodified, on a MiniWoB page through the real orchestrator and gateway: the
scripted engine answers in its ``AgentOutput`` schema; the page's own JavaScript scores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from openforge.harnesses.browser_use import PREFIX
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.suites.miniwob.loader import miniwob_task

from .conftest import admin_headers


def _reply(*actions: dict[str, object]) -> str:
    return json.dumps(
        {
            "evaluation_previous_goal": "Started.",
            "memory": "On the task page.",
            "next_goal": "Do the task.",
            "action": list(actions),
        }
    )


async def test_browser_use_drives_the_page_through_the_gateway_and_scores(
    scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    if not Path(PREFIX, "bin", "python").is_file():
        pytest.fail(f"Browser-Use is not installed at {PREFIX}: scripts/install-harnesses.sh")
    # click-button seed 3 ('Click on the "no" button.'): the "no" button is the page's first
    # focusable element. Browser-Use's element indices are its DOM's backend node ids, which
    # vary between browser starts, so a fixed script presses keys (through Browser-Use's own
    # send_keys action over DevTools) rather than clicking an index; then it says it is done.
    gateway = scripted_gateway(
        [
            _reply({"send_keys": {"keys": "Tab"}}, {"send_keys": {"keys": "Enter"}}),
            _reply({"done": {"text": "Pressed no.", "success": True}}),
        ]
    )
    config = RolloutConfig(
        tasks=[miniwob_task("click-button", 3)],
        harness="browser-use",
        harness_options={"max_steps": 3},
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        n=1,
        retry_backoff_s=0.0,
        backend_options={"root": tmp_path / "sandboxes"},
    )
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None), res
    assert res.details is not None and res.details["raw"] == 1
    rec = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers()).json()
    # Two policy calls (the keys, done) and no judge call: it is off.
    assert len(rec["calls"]) == 2
    history = json.loads(
        (
            tmp_path
            / "run"
            / "rollouts"
            / "miniwob"
            / "click-button"
            / "3"
            / "0"
            / "transcript.json"
        ).read_text()
    )["history"]
    assert "<button />\n\tno" in history[0]["state_message"]
    assert history[-1]["result"][0]["is_done"] is True
