"""The desktop environment in a real bubblewrap sandbox (Xvfb, openbox, PyAutoGUI) on an
OSWorld-format task, scored by its own evaluator; samples are written here in OSWorld's
layout (``evaluation_examples/test_all.json`` + ``examples/<domain>/<id>.json``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from openforge.sandboxes.base import SandboxSpec
from openforge.sandboxes.local import LocalBackend
from openforge.suites import load_tasks
from openforge.tasks import Task

from .test_browser import _sandbox_pids

HOME = "/home/sandbox"
NOTES = f"{HOME}/notes.txt"
EDIT_ID = "0b7d3c2e-6f0a-4d8e-9a51-2b1c7f0e5a11"
INFEASIBLE_ID = "9e4a1f55-3c2d-4b7a-8e0f-6d5c4b3a2f10"
# Runs inside the sandbox: screenshot, then the PyAutoGUI code in $CODE, then DONE.
CLIENT = r"""
import json, os, urllib.request
u = os.environ["OPENFORGE_DESKTOP_URL"]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    return json.load(urllib.request.urlopen(urllib.request.Request(u + path, data=data)))
out = {"first": call("/observation")}
out["steps"] = [call("/action", {"action_space": "pyautogui", "code": c})
                for c in json.loads(os.environ["CODE"])]
print(json.dumps(out))
"""


def _suite(root: Path) -> Path:
    ev = root / "evaluation_examples"
    (ev / "examples" / "os").mkdir(parents=True)
    (ev / "files").mkdir()
    (ev / "files" / "notes.txt").write_text("hello desktop")
    edit = {
        "id": EDIT_ID,
        "snapshot": "os",
        "instruction": "Type 'hello desktop' into the open text editor and save the file.",
        "source": "openforge-test",
        "config": [
            # A launch that ends without a window (its wait stops when it exits).
            {"type": "launch", "parameters": {"command": "true", "shell": True}},
            {"type": "launch", "parameters": {"command": ["mousepad", NOTES]}},
            # Far shorter than mousepad takes to come up on a loaded machine: the typing
            # relies on the launch step's own wait for the focused window (the sleep alone
            # failed under load).
            {"type": "sleep", "parameters": {"seconds": 0.1}},
        ],
        "trajectory": "trajectories/",
        "related_apps": ["os"],
        "evaluator": {
            "func": "compare_text_file",
            "result": {"type": "vm_file", "path": NOTES, "dest": "notes.txt"},
            "expected": {"type": "cloud_file", "path": "https://x.invalid/n", "dest": "notes.txt"},
        },
    }
    infeasible = {
        "id": INFEASIBLE_ID,
        "snapshot": "os",
        "instruction": "Turn the screen into a toaster.",
        "config": [],
        "evaluator": {"func": "infeasible"},
    }
    download = {
        "id": "download-me",
        "instruction": "x",
        "config": [{"type": "download", "parameters": {"files": []}}],
        "evaluator": {"func": "exact_match", "result": {"type": "rule", "rules": {}}},
    }
    for example in (edit, infeasible, download):
        (ev / "examples" / "os" / f"{example['id']}.json").write_text(json.dumps(example))
    (ev / "test_all.json").write_text(json.dumps({"os": [EDIT_ID, INFEASIBLE_ID, "download-me"]}))
    return ev


async def _all_gone(sid: str) -> bool:
    # The kernel ends a PID namespace's processes as its init exits: not all at that instant.
    for _ in range(100):
        if not _sandbox_pids(sid):
            return True
        await asyncio.sleep(0.05)
    return False


async def _run(backend: LocalBackend, task: Task, code: list[str]) -> tuple[dict[str, Any], float]:
    """Do ``code`` in the task's desktop, then its evaluator; (client output, reward)."""
    assert task.gui is not None
    box = await backend.create(SandboxSpec(network="none", host_paths=task.gui.host_paths()))
    try:
        await box.put({"client.py": CLIENT.encode()})
        await task.gui.prepare(box, HOME)
        argv = task.gui.wrap_argv(["python3", "client.py"], HOME)
        res = await box.exec(argv, env={"CODE": json.dumps(code)}, timeout=120)
        assert res.exit_code == 0, res.stderr.decode()
        assert await _all_gone(box.id)  # Xvfb, openbox, the editor: all gone
        out = json.loads(res.stdout.decode().splitlines()[-1])
        await box.put(task.verify_bytes())
        verdict = await box.exec(task.verify_command, timeout=60)
        assert verdict.exit_code == 0, verdict.stderr.decode()
        return out, float(json.loads(verdict.stdout.decode().splitlines()[-1])["reward"])
    finally:
        await box.close()


async def test_osworld_task_scored_by_its_evaluator(backend: LocalBackend, tmp_path: Path) -> None:
    loaded = load_tasks(_suite(tmp_path))
    (error,) = loaded.errors
    assert error.field == "config[0].type" and "'download'" in error.problem
    tasks = loaded.by_id()
    edit = tasks[f"osworld/os/{EDIT_ID}"]
    typed = "pyautogui.typewrite('hello desktop'); pyautogui.hotkey('ctrl', 's')"
    out, reward = await _run(backend, edit, [typed, "time.sleep(0.5)", "DONE"])
    assert out["first"]["size"] == [1280, 800]
    assert [s["error"] for s in out["steps"]] == [None, None, None]
    assert out["steps"][-1]["status"] == "done"
    assert reward == 1.0
    wrong = "pyautogui.typewrite('goodbye'); pyautogui.hotkey('ctrl', 's')"
    _, reward = await _run(backend, edit, [wrong, "time.sleep(0.5)", "DONE"])
    assert reward == 0.0
    # Infeasible: only the agent's FAIL scores.
    infeasible = tasks[f"osworld/os/{INFEASIBLE_ID}"]
    assert (await _run(backend, infeasible, ["FAIL"]))[1] == 1.0
    assert (await _run(backend, infeasible, ["pyautogui.click(5, 5)", "DONE"]))[1] == 0.0
