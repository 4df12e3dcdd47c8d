"""A third-party computer-use agent, unmodified: cua-agent (PyPI, pinned in
scripts/install-harnesses.sh) sends, through LiteLLM, Anthropic's ``computer_20251124``
tool (model ``anthropic/claude-opus-4-5``) or OpenAI's ``computer_use_preview`` tool
(``openai/computer-use-preview``) to the gateway, whose scripted policy emits that
vendor's tool calls; its computer is the desktop sandbox, reached through the custom
computer handler cua-agent documents for users' own computers (a dict of functions, here
forwarding each action to the desktop server's ``openai`` action space). The
OSWorld-format task's evaluator scores the file it left."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from gateway_process import MODEL
from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.sandboxes.local import LocalBackend
from openforge.store.sqlite import SqliteStore
from openforge.suites import load_tasks

from .test_desktop import EDIT_ID, _suite
from .test_vendor_desktop import _in_desktop

PREFIX = Path("/opt/openforge/cua-agent")

# The user's side of cua-agent: a computer handler and a run, as its docs show them.
GLUE = r"""
import asyncio, base64, json, os, time, urllib.request
from cua_agent import ComputerAgent

desk = os.environ["OPENFORGE_DESKTOP_URL"]

def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    return json.load(urllib.request.urlopen(urllib.request.Request(desk + path, data=data)))

done = []

def act(**action):
    out = call("/action", {"action_space": "openai", **action})
    done.append(action)
    if out.get("error"):
        raise RuntimeError(out["error"])

computer = {
    "screenshot": lambda: base64.b64decode(call("/observation")["screenshot"]),
    "dimensions": (1280, 800),
    "environment": "linux",
    "click": lambda x, y, button="left": act(type="click", x=x, y=y, button=button),
    "double_click": lambda x, y: act(type="double_click", x=x, y=y),
    "type": lambda text: act(type="type", text=text),
    "keypress": lambda keys: act(type="keypress", keys=[keys] if isinstance(keys, str) else keys),
    "scroll": lambda x, y, scroll_x, scroll_y: act(
        type="scroll", x=x, y=y, scroll_x=scroll_x, scroll_y=scroll_y),
    "move": lambda x, y: act(type="move", x=x, y=y),
    "drag": lambda path: act(type="drag", path=path),
    "wait": lambda ms=1000: time.sleep(ms / 1000),
}

async def main():
    agent = ComputerAgent(model=os.environ["MODEL"], tools=[computer],
                          api_base=os.environ["BASE_URL"], api_key="unused")
    kinds = []
    async for result in agent.run(os.environ["TASK"]):
        kinds += [item.get("type") for item in result.get("output", [])]
    # The editor saves in the background: wait for it before saying DONE.
    for _ in range(100):
        if os.path.exists(os.environ["NOTES"]) and open(os.environ["NOTES"]).read():
            break
        time.sleep(0.2)
    call("/action", {"action_space": "pyautogui", "code": "DONE"})
    print(json.dumps({"done": done, "kinds": kinds}))

asyncio.run(main())
"""


def _call(**arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": "computer", "arguments": arguments}]}


# Per vendor: the model cua-agent is told, the base URL it gets, the policy's calls in that
# vendor's shape, where the click lands on the screen, and what the first request declared.
_VENDORS = {
    "anthropic": (
        "anthropic/claude-opus-4-5",
        "anthropic_base_url",
        [
            _call(action="screenshot"),
            _call(action="left_click", coordinate=[640, 400]),
            _call(action="type", text="hello desktop"),
            _call(action="key", text="ctrl+s"),
        ],
        # cua-agent shows Claude a 1024x640 screenshot and scales its coordinates back up.
        (800, 500),
        "computer_20251124",
    ),
    "openai": (
        "openai/computer-use-preview",
        "openai_base_url",
        [
            _call(type="screenshot"),
            _call(type="click", button="left", x=640, y=400),
            _call(type="type", text="hello desktop"),
            _call(type="keypress", keys=["ctrl", "s"]),
        ],
        (640, 400),
        "computer_use_preview",
    ),
}


@pytest.mark.parametrize("vendor", sorted(_VENDORS))
async def test_cua_agent_completes_an_osworld_task(vendor: str, tmp_path: Path) -> None:
    if not (PREFIX / "bin" / "python").is_file():
        pytest.fail(f"cua-agent is not installed at {PREFIX}: scripts/install-harnesses.sh")
    model, url_key, calls_, (x, y), tool_type = _VENDORS[vendor]
    task = load_tasks(_suite(tmp_path)).by_id()[f"osworld/os/{EDIT_ID}"]
    script = [*calls_, {"text": "I typed the text and saved the file."}]
    path = tmp_path / "script.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in script) + b"\n")
    backend = LocalBackend(root=tmp_path / "sandboxes")
    try:
        engine = ScriptedEngine.for_model(path, MODEL)
        async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=MODEL) as gw:
            async with httpx.AsyncClient(headers=gw.admin_headers) as c:
                r = (await c.post(gw.admin_url + "/rollouts", json={})).json()
            env = {
                "MODEL": model,
                "BASE_URL": r[url_key],
                "TASK": task.instruction,
                "NOTES": "/home/sandbox/notes.txt",
                "DO_NOT_TRACK": "1",  # cua's telemetry: the sandbox reaches only the gateway
            }
            python = str(PREFIX / "bin" / "python")
            out, reward = await _in_desktop(backend, task, GLUE, env, gw.url, python)
            calls = await gw.store.calls(r["rollout_id"])
    finally:
        await backend.close()
    assert isinstance(out, dict)
    assert out["done"] == [
        {"type": "click", "x": x, "y": y, "button": "left"},
        {"type": "type", "text": "hello desktop"},
        {"type": "keypress", "keys": ["ctrl", "s"]},
    ]
    assert out["kinds"].count("computer_call") == 4 and out["kinds"][-1] == "message"
    assert reward == 1.0
    assert len(calls) == 5 and all(c.status == "ok" for c in calls)
    assert not any(c.fork for c in calls[1:])  # LiteLLM's resent history matched exactly
    first = orjson.loads(calls[0].raw_request)
    assert [t["type"] for t in first["tools"]] == [tool_type]
    if vendor == "anthropic":
        assert calls[0].harness.get("anthropic-beta") == "computer-use-2025-11-24"
