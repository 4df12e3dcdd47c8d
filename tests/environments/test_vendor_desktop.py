"""A computer-use loop written against the Anthropic SDK, in the shape of Anthropic's
reference loop (the vendor's ``computer_20251124`` tool, every action forwarded as the
model wrote it, a screenshot back with each result), completes an OSWorld-format task in
the desktop sandbox through a real gateway whose scripted policy emits the vendor's tool
calls; the task's own evaluator scores the file it left. The desktop server's ``openai``
action space runs Responses ``computer_call`` actions the same way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway_process import MODEL
from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.sandboxes.base import SandboxSpec
from openforge.sandboxes.local import LocalBackend
from openforge.store.sqlite import SqliteStore
from openforge.suites import load_tasks
from openforge.tasks import Task

from .test_desktop import EDIT_ID, HOME, NOTES, _suite

# Runs inside the sandbox with this venv's Python (it has the anthropic SDK). The
# reference loop's shape: call, run each tool_use on the desktop, answer with the
# action's output and a screenshot, until the model stops asking for tools.
LOOP = r"""
import base64, json, os, sys, urllib.request
import anthropic

desk = os.environ["OPENFORGE_DESKTOP_URL"]

def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    return json.load(urllib.request.urlopen(urllib.request.Request(desk + path, data=data)))

tools = [{"type": "computer_20251124", "name": "computer", "display_width_px": 1280,
          "display_height_px": 800, "enable_zoom": True}]
client = anthropic.Anthropic(base_url=os.environ["BASE_URL"], api_key="unused", max_retries=0)
messages = [{"role": "user", "content": os.environ["TASK"]}]
ran = []
for _ in range(10):
    reply = client.beta.messages.create(
        model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=tools,
        betas=["computer-use-2025-11-24"])
    messages.append({"role": "assistant",
                     "content": [b.model_dump(exclude_none=True) for b in reply.content]})
    if reply.stop_reason != "tool_use":
        break
    results = []
    for block in reply.content:
        if block.type != "tool_use":
            continue
        out = call("/action", {"action_space": "claude", **block.input})
        ran.append({"input": block.input, "error": out.get("error"), "image": "image" in out,
                    "output": out.get("output")})
        image = out.get("image") or call("/observation")["screenshot"]
        content = [{"type": "text", "text": out.get("error") or out.get("output") or "ok"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": image}}]
        results.append({"type": "tool_result", "tool_use_id": block.id, "content": content,
                        "is_error": bool(out.get("error"))})
    messages.append({"role": "user", "content": results})
call("/action", {"action_space": "pyautogui", "code": "DONE"})
print(json.dumps({"ran": ran, "final": reply.content[0].text}))
"""

# Runs inside the sandbox: Responses-style actions straight to the desktop server.
OPENAI_ACTIONS = r"""
import json, os, time, urllib.request
desk = os.environ["OPENFORGE_DESKTOP_URL"]
def act(body):
    req = urllib.request.Request(desk + "/action", data=json.dumps(body).encode())
    return json.load(urllib.request.urlopen(req))
out = [act({"action_space": "openai", **a}) for a in json.loads(os.environ["ACTIONS"])]
# The editor saves in the background: on a loaded machine, wait for it as an agent would.
for _ in range(100):
    if os.path.exists(os.environ["NOTES"]) and open(os.environ["NOTES"]).read():
        break
    time.sleep(0.2)
out.append(act({"action_space": "pyautogui", "code": "DONE"}))
print(json.dumps(out))
"""


def _call(**arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "computer", "arguments": arguments}]}


async def _in_desktop(
    backend: LocalBackend,
    task: Task,
    script: str,
    env: dict[str, str],
    gateway: str | None,
    python: str = sys.executable,
) -> tuple[dict[str, Any] | list[Any], float]:
    """Run ``script`` with ``python`` (this venv's by default) in the task's desktop;
    (its output, reward)."""
    assert task.gui is not None
    paths: set[str] = set()
    if python == sys.executable:  # else a venv under /opt, which every sandbox sees
        paths = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix)}
        paths.add(str(Path(sys.prefix).absolute()))
    spec = SandboxSpec(
        network="gateway" if gateway else "none",
        gateway_url=gateway,
        host_paths=tuple(sorted(paths | set(task.gui.host_paths()))),
    )
    box = await backend.create(spec)
    try:
        await box.put({"loop.py": script.encode()})
        await task.gui.prepare(box, HOME)
        if gateway:
            env = {**env, "BASE_URL": env["BASE_URL"].replace(gateway, box.gateway_url or "")}
        argv = task.gui.wrap_argv([python, "loop.py"], HOME)
        res = await box.exec(argv, env=env, timeout=240)
        assert res.exit_code == 0, res.stderr.decode()[-3000:]
        out = json.loads(res.stdout.decode().splitlines()[-1])
        await box.put(task.verify_bytes())
        verdict = await box.exec(task.verify_command, timeout=60)
        assert verdict.exit_code == 0, verdict.stderr.decode()
        return out, float(json.loads(verdict.stdout.decode().splitlines()[-1])["reward"])
    finally:
        await box.close()


async def test_anthropic_sdk_loop_completes_an_osworld_task(tmp_path: Path) -> None:
    task = load_tasks(_suite(tmp_path)).by_id()[f"osworld/os/{EDIT_ID}"]
    script = [
        _call(action="screenshot"),
        _call(action="left_click", coordinate=[640, 400]),
        _call(action="type", text="hello desktop"),
        _call(action="key", text="ctrl+s"),
        _call(action="wait", duration=2),
        _call(action="zoom", region=[0, 0, 640, 400]),
        _call(action="cursor_position"),
        {"text": "Saved the file."},
    ]
    path = tmp_path / "script.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in script) + b"\n")
    engine = ScriptedEngine.for_model(path, MODEL)
    backend = LocalBackend(root=tmp_path / "sandboxes", sandbox_uid="caller")
    try:
        async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=MODEL) as gw:
            async with httpx.AsyncClient(headers=gw.admin_headers) as c:
                r = (await c.post(gw.admin_url + "/rollouts", json={})).json()
            env = {"BASE_URL": r["anthropic_base_url"], "TASK": task.instruction}
            out, reward = await _in_desktop(backend, task, LOOP, env, gw.url)
            calls = await gw.store.calls(r["rollout_id"])
    finally:
        await backend.close()
    assert isinstance(out, dict)
    assert [step["input"]["action"] for step in out["ran"]] == [
        "screenshot",
        "left_click",
        "type",
        "key",
        "wait",
        "zoom",
        "cursor_position",
    ]
    assert [step["error"] for step in out["ran"]] == [None] * 7
    assert [s["image"] for s in out["ran"]] == [True, False, False, False, True, True, False]
    assert out["ran"][-1]["output"].startswith("X=640,Y=400")
    assert out["final"] == "Saved the file."
    assert reward == 1.0  # the evaluator read the saved file
    assert len(calls) == 8 and all(c.status == "ok" for c in calls)
    assert not any(c.fork for c in calls[1:])  # each call extends the last exactly


async def test_openai_actions_run_on_the_desktop(tmp_path: Path) -> None:
    task = load_tasks(_suite(tmp_path)).by_id()[f"osworld/os/{EDIT_ID}"]
    actions = [
        {"type": "screenshot"},
        {"type": "click", "button": "left", "x": 640, "y": 400},
        {"type": "type", "text": "hello desktop"},
        {"type": "keypress", "keys": ["CTRL", "S"]},
        {"type": "wait"},
        {"type": "scroll", "x": 640, "y": 400, "scroll_x": 0, "scroll_y": 200},
        {"type": "fly"},
    ]
    backend = LocalBackend(root=tmp_path / "sandboxes", sandbox_uid="caller")
    try:
        out, reward = await _in_desktop(
            backend, task, OPENAI_ACTIONS, {"ACTIONS": json.dumps(actions), "NOTES": NOTES}, None
        )
    finally:
        await backend.close()
    assert isinstance(out, list)
    assert [step.get("error") for step in out[:6]] == [None] * 6
    assert "image" in out[0] and "image" in out[4]
    assert out[6]["error"] == "unknown computer action 'fly'"
    assert out[-1]["status"] == "done"
    assert reward == 1.0
