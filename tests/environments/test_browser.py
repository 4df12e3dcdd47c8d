"""The browser environment in a real bubblewrap sandbox: headless Chromium under Playwright,
observations, actions, MiniWoB's own reward, the network allowlist and process cleanup."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from openforge.environments import browser
from openforge.environments.base import server_python
from openforge.guest import bundle, command
from openforge.sandboxes.base import Sandbox, SandboxSpec
from openforge.sandboxes.local import LocalBackend
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.suites.miniwob.loader import miniwob_task

HOME = SANDBOX_HOME
# Runs inside the sandbox: does the JSON actions in $ACTIONS, prints every answer.
CLIENT = r"""
import json, os, sys, urllib.request
u = os.environ["OPENFORGE_BROWSER_URL"]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(u + path, data=data, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
out = {"before": call("/observation?mode=som"), "plain": call("/observation?mode=screenshot")}
out["results"] = [call("/action", a) for a in json.loads(os.environ["ACTIONS"])]
out["after"] = call("/observation?mode=axtree")
print(json.dumps(out))
"""


async def _box(backend: LocalBackend, name: str, seed: int) -> Sandbox:
    task = miniwob_task(name, seed)
    assert task.gui is not None
    box = await backend.create(SandboxSpec(network="none", host_paths=task.gui.host_paths()))
    await box.put({**task.workspace_bytes(), "client.py": CLIENT.encode()})
    await task.gui.prepare(box, HOME)
    return box


async def _run(box: Sandbox, actions: list[dict[str, object]]) -> dict[str, Any]:
    argv = browser.wrap_argv(["python3", "client.py"], HOME)
    res = await box.exec(argv, env={"ACTIONS": json.dumps(actions)}, timeout=120)
    assert res.exit_code == 0, res.stderr.decode()
    out: dict[str, Any] = json.loads(res.stdout.decode().splitlines()[-1])
    return out


async def _verify(box: Sandbox, name: str, seed: int) -> dict[str, Any]:
    task = miniwob_task(name, seed)
    await box.put(task.verify_bytes())
    res = await box.exec(task.verify_command, timeout=60)
    assert res.exit_code == 0, res.stderr.decode()
    verdict: dict[str, Any] = json.loads(res.stdout.decode().splitlines()[-1])
    return verdict


def _element(obs: dict[str, Any], role: str, name: str) -> int:
    elements = obs["elements"]
    assert isinstance(elements, list)
    return next(int(e["id"]) for e in elements if e["role"] == role and e["name"] == name)


async def test_correct_click_scores_the_pages_own_reward(backend: LocalBackend) -> None:
    # click-button seed 3: 'Click on the "no" button.' (also buttons "Okay" and "okay").
    box = await _box(backend, "click-button", 3)
    try:
        first = await _run(box, [])
        before = first["before"]
        assert isinstance(before, dict)
        assert before["goal"] == 'Click on the "no" button.'
        assert '[2] button "no"' in before["axtree"]
        assert "Last reward" not in before["axtree"]  # MiniWoB's score display is hidden
        shot, plain = before["screenshot"], first["plain"]["screenshot"]
        assert base64.b64decode(shot)[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot != plain  # the set-of-marks boxes are drawn on the labelled screenshot
        box2 = await _box(backend, "click-button", 3)
        try:
            out = await _run(box2, [{"action": "click", "id": _element(before, "button", "no")}])
            assert out["results"] == [
                {"done": True, "reward": 1.0, "raw": 1, "reason": None, "error": None, "steps": 1}
            ]
            verdict = await _verify(box2, "click-button", 3)
            assert verdict["reward"] == 1.0
        finally:
            await box2.close()
        # Nothing was done in the first box: the page is not done and the reward is 0.
        verdict = await _verify(box, "click-button", 3)
        assert verdict["reward"] == 0.0 and verdict["details"]["done"] is False
    finally:
        await box.close()


async def test_wrong_click_scores_nothing_and_ends_the_episode(backend: LocalBackend) -> None:
    box = await _box(backend, "click-button", 3)
    try:
        out = await _run(box, [{"action": "click", "id": 5}, {"action": "click", "id": 2}])
        first, second = out["results"]
        assert (first["done"], first["reward"], first["raw"]) == (True, 0.0, -1)
        assert second["error"] == "the task is over"  # no second try after a wrong answer
        assert (await _verify(box, "click-button", 3))["reward"] == 0.0
    finally:
        await box.close()


async def test_type_key_and_refused_actions(backend: LocalBackend) -> None:
    # enter-text seed 1: 'Enter "Jerald" into the text field and press Submit.'
    box = await _box(backend, "enter-text", 1)
    try:
        out = await _run(
            box,
            [
                {"action": "goto", "url": "http://example.com/"},
                {"action": "click", "id": 99},
                {"action": "fly"},
                {"action": "type", "id": 3, "text": "Jerald"},
                {"action": "click", "id": 4},
            ],
        )
        goto, missing, unknown, typed, submit = out["results"]
        assert "outside this task's sites" in goto["error"]
        assert missing["error"] == "no element [99] on the page"
        assert "unknown action 'fly'" in unknown["error"]
        assert typed["error"] is None and typed["done"] is False
        assert (submit["done"], submit["reward"]) == (True, 1.0)
    finally:
        await box.close()


async def test_select_picks_a_listed_option(backend: LocalBackend) -> None:
    """MiniWoB's choose-list: the list's options are on the page's element, a select by
    label (any case) then Submit scores 1; a wrong option scores 0, an unknown one or a
    select on a non-list is refused to the agent."""
    box = await _box(backend, "choose-list", 1)
    try:
        before = (await _run(box, []))["before"]
        goal = before["goal"]
        wanted = goal.split("Select ", 1)[1].split(" from the list", 1)[0]
        lists = [e for e in before["elements"] if e["role"] == "combobox"]
        assert len(lists) == 1 and wanted in lists[0]["options"]
        assert f"options={json.dumps(lists[0]['options'])}" in before["axtree"]
        pick, submit = lists[0]["id"], _element(before, "button", "Submit")
        other = next(o for o in lists[0]["options"] if o != wanted)
        # Each box serves one episode: a submitted page is over.
        for option, reward in ((wanted.upper(), 1.0), (other, 0.0)):
            run = await _box(backend, "choose-list", 1)
            try:
                out = await _run(
                    run,
                    [
                        {"action": "select", "id": pick, "text": "no such option"},
                        {"action": "select", "id": submit, "text": wanted},
                        {"action": "select", "id": pick, "text": option},
                        {"action": "click", "id": submit},
                    ],
                )
                unknown, not_list, chosen, submitted = out["results"]
                assert unknown["error"] == f'[{pick}] has no option "no such option"'
                assert not_list["error"] == f"element [{submit}] is not a list to select from"
                assert chosen["error"] is None and chosen["done"] is False
                assert (submitted["done"], submitted["reward"]) == (True, reward)
                assert (await _verify(run, "choose-list", 1))["reward"] == reward
            finally:
                await run.close()
    finally:
        await box.close()


def _sandbox_pids(sid: str) -> list[int]:
    """Processes on this machine whose environment names sandbox ``sid``."""
    marker = f"OPENFORGE_SANDBOX_ID={sid}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _chromium_pids(sid: str) -> list[int]:
    out = []
    for pid in _sandbox_pids(sid):
        try:
            if b"chrom" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            continue
    return out


async def test_no_browser_process_outlives_its_exec_or_a_cancel(backend: LocalBackend) -> None:
    box = await _box(backend, "click-button", 1)
    try:
        await _run(box, [{"action": "click", "id": 4}])
        for _ in range(100):  # the PID namespace's processes end as its init exits
            if not _sandbox_pids(box.id):
                break
            await asyncio.sleep(0.05)
        assert _sandbox_pids(box.id) == []  # the exec ended: server and Chromium are gone
        # Cancelled mid-episode: the harness is still running when the exec is cancelled.
        argv = browser.wrap_argv(["sleep", "300"], HOME)
        run = asyncio.create_task(box.exec(argv, timeout=600))
        for _ in range(600):
            if _chromium_pids(box.id):
                break
            await asyncio.sleep(0.05)
        assert _chromium_pids(box.id), "Chromium never started"
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        for _ in range(100):
            if not _sandbox_pids(box.id):
                break
            await asyncio.sleep(0.05)
        assert _sandbox_pids(box.id) == []
    finally:
        await box.close()


async def test_a_result_gone_after_the_environment_ran_scores_zero(backend: LocalBackend) -> None:
    # The orchestrator verifies only rollouts whose environment came up (status 96 is its
    # infra_error; test_webjudge's unreachable site), and the server writes its result at
    # once: a result gone at verify time was removed from inside the sandbox, the agent's
    # doing, so it is a 0 with the reason, never an infra_error masking the failure.
    task = miniwob_task("click-button", 1)
    box = await backend.create(SandboxSpec(network="none"))
    try:
        await box.put(task.verify_bytes())
        res = await box.exec(task.verify_command, timeout=60)
        assert res.exit_code == 0, res.stderr.decode()
        verdict = json.loads(res.stdout.decode().splitlines()[-1])
        assert verdict["reward"] == 0.0 and "gone or unreadable" in verdict["details"]["why_zero"]
    finally:
        await box.close()


def test_the_server_stops_on_sigterm_mid_episode(tmp_path: Path) -> None:
    # Run on the host, as a teacher observing a page does. SIGTERM used to raise
    # KeyboardInterrupt wherever the server was, inside Playwright's event loop too, which
    # swallowed it (a server that never stopped) or failed the orderly stop. Polling the page
    # state all the time puts most signals inside a Playwright call.
    import dataclasses
    import signal
    import subprocess
    import time

    task = miniwob_task("click-button", 1)
    assert isinstance(task.gui, browser.BrowserEnvironment)
    for rel, data in task.workspace_bytes().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    config = {**dataclasses.asdict(task.gui), "chromium": browser.chromium_path()}
    (tmp_path / "env.json").write_text(json.dumps({**config, "poll_s": 0.001}))
    (tmp_path / "server.pyz").write_bytes(bundle("browser_server"))
    python = server_python("playwright", "test")
    argv = command(python, "server.pyz", "--config", "env.json", "--port-file", "port")
    for delay in (0.2, 0.45, 0.7, 0.95):
        for name in ("port", "result.json"):
            (tmp_path / name).unlink(missing_ok=True)
        proc = subprocess.Popen([*argv, "--result", "result.json"], cwd=tmp_path)
        try:
            for _ in range(1200):
                if (tmp_path / "port").is_file() or proc.poll() is not None:
                    break
                time.sleep(0.05)
            assert (tmp_path / "port").is_file(), "the server never became ready"
            time.sleep(delay)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
            result = json.loads((tmp_path / "result.json").read_text())
            assert result["done"] is False  # the last state, written on the orderly stop
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
