"""The browser and desktop environments in podman containers of the GUI image
(deploy/build-gui-image.sh), run the way a task's own image is, with sandboxd mounted beside
it: MiniWoB's own reward and an OSWorld-format evaluator score as on the local backend, the
environments find the image's Python and Chromium (not the host's), and nothing the
environment started outlives a cancelled exec or the sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from openforge.environments import browser
from openforge.environments.base import GUI_PYTHON
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.sandboxes import SandboxError, SandboxSpec, create_backend
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.container import ContainerBackend
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.suites import load_tasks
from openforge.suites.miniwob.loader import miniwob_task
from openforge.tasks import Task
from openforge.tasks.episode import sandbox_spec

from .test_desktop import CLIENT as DESKTOP_CLIENT
from .test_desktop import EDIT_ID, _suite
from .test_gui_hostile import CDP_CLIENT, FORGED_MINIWOB, FORGER

# The first test to ask for the GUI image builds it when missing (about 4 min here).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HOME = SANDBOX_HOME
# Runs inside the sandbox: clicks the button named $TARGET, says which Python and Chromium
# the environment runs.
BROWSER_CLIENT = r"""
import json, os, urllib.request
u = os.environ["OPENFORGE_BROWSER_URL"]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(u + path, data=data, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
obs = call("/observation?mode=axtree")
target = next(e["id"] for e in obs["elements"]
              if e["role"] == "button" and e["name"] == os.environ["TARGET"])
procs = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            procs.append(f.read().split(b"\0")[0].decode())
    except OSError:
        pass
print(json.dumps({"goal": obs["goal"], "result": call("/action", {"action": "click", "id": target}),
                  "procs": procs}))
"""


def test_the_image_pins_what_the_host_venv_pins() -> None:
    # The local GUI venv (scripts/install-harnesses.sh) and the image's must run the same code.
    repo = Path(__file__).resolve().parents[2]
    script = (repo / "scripts/install-harnesses.sh").read_text()
    pins = next(line for line in script.splitlines() if line.startswith("GUI_PINS="))
    wanted = {p.lower() for p in pins.split("=", 1)[1].strip('"').split()}
    lines = (repo / "deploy/gui-requirements.txt").read_text().splitlines()
    locked = {line.strip().lower() for line in lines if line.strip() and line[0] != "#"}
    assert wanted and wanted <= locked


@pytest.fixture
async def podman(gui_image: str) -> AsyncIterator[ContainerBackend]:
    backend = create_backend("podman", gui_image=gui_image)
    assert isinstance(backend, ContainerBackend)
    try:
        yield backend
    finally:
        await backend.close()


def _inspect(name: str, fmt: str) -> str | None:
    out = subprocess.run(["podman", "container", "inspect", "--format", fmt, name],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else None


def _container_procs(container_id: str) -> dict[int, str]:
    """This machine's processes in the container's cgroup: pid -> command line."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if container_id in Path(f"/proc/{entry}/cgroup").read_text():
                found[int(entry)] = (
                    Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                )
        except OSError:
            continue
    return found


def _gui_procs(container_id: str) -> list[str]:
    return [c for c in _container_procs(container_id).values() if "chrom" in c or "Xvfb" in c]


async def _browser_box(backend: ContainerBackend, task: Task) -> Sandbox:
    spec = sandbox_spec(task, "/workspace")
    assert spec.gui and spec.task_image is None
    spec.network = "none"
    box = await backend.create(spec)
    await box.put({**task.workspace_bytes(), "client.py": BROWSER_CLIENT.encode()})
    assert task.gui is not None
    await task.gui.prepare(box, HOME)
    return box


async def _click(box: Sandbox, task: Task, target: str) -> tuple[dict[str, Any], float]:
    """Click the button named ``target`` in the wrapped exec, then run the task's verifier."""
    assert task.gui is not None
    argv = task.gui.wrap_argv(["python3", "client.py"], HOME)
    res = await box.exec(argv, env={"TARGET": target}, timeout=180)
    assert res.exit_code == 0, res.stderr.decode()
    out: dict[str, Any] = json.loads(res.stdout.decode().splitlines()[-1])
    await box.put(task.verify_bytes())
    verdict = await box.exec(task.verify_command, timeout=60)
    assert verdict.exit_code == 0, verdict.stderr.decode()
    return out, float(json.loads(verdict.stdout.decode().splitlines()[-1])["reward"])


async def test_miniwob_in_the_gui_image_scores_the_pages_own_reward(
    podman: ContainerBackend,
) -> None:
    # click-button seed 3: 'Click on the "no" button.' (also buttons "Okay" and "okay").
    task = miniwob_task("click-button", 3)
    box = await _browser_box(podman, task)
    try:
        out, reward = await _click(box, task, "no")
        assert out["goal"] == 'Click on the "no" button.'
        assert (out["result"]["done"], out["result"]["reward"]) == (True, 1.0)
        assert reward == 1.0
        # The image's own Python and Chromium ran (the host's are not in the container).
        assert GUI_PYTHON in out["procs"]
        assert any(p.startswith("/usr/lib/chromium/chromium") for p in out["procs"])
    finally:
        await box.close()
    box = await _browser_box(podman, task)
    try:
        out, reward = await _click(box, task, "Okay")
        assert (out["result"]["done"], out["result"]["raw"]) == (True, -1)
        assert reward == 0.0
    finally:
        await box.close()


async def test_browser_agent_rollout_through_the_orchestrator_on_podman(
    gui_image: str, scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    # The built-in browser agent, a scripted model and the gateway-only network: seed 3's
    # [2] is the "no" button asked for.
    gateway = scripted_gateway(["Action: Click [2]"])
    config = RolloutConfig(
        tasks=[miniwob_task("click-button", 3)],
        harness="browser-agent",
        harness_options={"max_steps": 2},
        gateway_url=gateway,
        backend="podman",
        backend_options={"gui_image": gui_image},
        out_dir=tmp_path / "run",
        retries=0,
    )
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.error) == ("completed", 1.0, None)


async def test_no_browser_outlives_a_cancel_or_the_sandbox(podman: ContainerBackend) -> None:
    task = miniwob_task("click-button", 1)
    box = await _browser_box(podman, task)
    name = f"openforge-{box.id}"
    try:
        cid = _inspect(name, "{{.Id}}")
        assert cid and _container_procs(cid)  # sandboxd, found by the container's cgroup
        run = asyncio.create_task(box.exec(browser.wrap_argv(["sleep", "300"], HOME), timeout=600))
        for _ in range(1200):
            if any("chrom" in p for p in _gui_procs(cid)):
                break
            await asyncio.sleep(0.05)
        assert _gui_procs(cid), "Chromium never started"
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        for _ in range(100):  # the exec's process tree is killed, orphans included
            if not _gui_procs(cid):
                break
            await asyncio.sleep(0.05)
        assert _gui_procs(cid) == []
        assert _container_procs(cid)  # the sandbox itself lives on
        again = await box.exec(browser.wrap_argv(["true"], HOME), timeout=180)
        assert again.exit_code == 0, again.stderr.decode()
    finally:
        await box.close()
    assert _inspect(name, "{{.Id}}") is None  # the container is removed
    assert _container_procs(cid) == {}


async def test_osworld_desktop_in_the_gui_image(podman: ContainerBackend, tmp_path: Path) -> None:
    """The OSWorld-format edit task of test_desktop.py (mousepad, PyAutoGUI typing, the
    task's compare_text_file evaluator) in a container instead of bubblewrap."""
    edit = load_tasks(_suite(tmp_path)).by_id()[f"osworld/os/{EDIT_ID}"]
    assert edit.gui is not None

    async def run(code: list[str]) -> float:
        assert edit.gui is not None
        spec = sandbox_spec(edit, "/workspace")
        spec.network = "none"
        box = await podman.create(spec)
        try:
            cid = _inspect(f"openforge-{box.id}", "{{.Id}}")
            assert cid
            await box.put({"client.py": DESKTOP_CLIENT.encode()})
            await edit.gui.prepare(box, HOME)
            argv = edit.gui.wrap_argv(["python3", "client.py"], HOME)
            res = await box.exec(argv, env={"CODE": json.dumps(code)}, timeout=180)
            assert res.exit_code == 0, res.stderr.decode()
            out = json.loads(res.stdout.decode().splitlines()[-1])
            assert out["first"]["size"] == [1280, 800]
            assert [s["error"] for s in out["steps"]] == [None] * len(code)
            for _ in range(100):
                if not _gui_procs(cid):
                    break
                await asyncio.sleep(0.05)
            assert _gui_procs(cid) == []  # Xvfb (and the editor) ended with the exec
            await box.put(edit.verify_bytes())
            verdict = await box.exec(edit.verify_command, timeout=60)
            assert verdict.exit_code == 0, verdict.stderr.decode()
            return float(json.loads(verdict.stdout.decode().splitlines()[-1])["reward"])
        finally:
            await box.close()

    typed = "pyautogui.typewrite('hello desktop'); pyautogui.hotkey('ctrl', 's')"
    assert await run([typed, "time.sleep(0.5)", "DONE"]) == 1.0
    wrong = "pyautogui.typewrite('goodbye'); pyautogui.hotkey('ctrl', 's')"
    assert await run([wrong, "time.sleep(0.5)", "DONE"]) == 0.0


async def test_a_missing_gui_image_is_an_infrastructure_error(
    podman_images: dict[str, str],
) -> None:
    backend = ContainerBackend("podman", gui_image="localhost/openforge-gui:absent")
    try:
        with pytest.raises(SandboxError, match=r"deploy/build-gui-image\.sh"):
            await backend.create(SandboxSpec(network="none", gui=True))
    finally:
        await backend.close()


async def test_an_environment_missing_from_the_image_ends_the_exec_as_infra(
    podman: ContainerBackend, podman_images: dict[str, str]
) -> None:
    # The plain sandbox image has neither the GUI venv nor Chromium: the wrapped exec ends
    # with status 96 saying what is missing, which the orchestrator makes infra_error before
    # any verifier runs (rollouts/runner.py).
    task = miniwob_task("click-button", 1)
    assert task.gui is not None
    box = await podman.create(SandboxSpec(network="none"))
    try:
        await task.gui.prepare(box, HOME)
        res = await box.exec(task.gui.wrap_argv(["true"], HOME), timeout=60)
        assert res.exit_code == 96
        assert b"needs a Python with playwright in the sandbox" in res.stderr
    finally:
        await box.close()


async def test_forged_pages_and_result_files_score_nothing_in_the_gui_image(
    podman: ContainerBackend,
) -> None:
    """The GUI rows of the hostile suite (test_gui_hostile.py) in the image: ``goto`` to pages
    the agent could make is refused, a forged or reloaded document put on top over DevTools
    is not read, and a forged result file is overwritten by the server's own state."""
    task = miniwob_task("click-button", 3)
    assert task.gui is not None
    for client, argv in (
        (CDP_CLIENT, [GUI_PYTHON, "client.py", json.dumps([FORGED_MINIWOB]), FORGED_MINIWOB]),
        (FORGER, ["python3", "client.py"]),
    ):
        box = await _browser_box(podman, task)
        try:
            await box.put({"client.py": client.encode()})
            res = await box.exec(task.gui.wrap_argv(argv, HOME), timeout=180)
            assert res.exit_code == 0, res.stderr.decode()
            await box.put(task.verify_bytes())
            verdict = await box.exec(task.verify_command, timeout=60)
            assert verdict.exit_code == 0, verdict.stderr.decode()
            got = json.loads(verdict.stdout.decode().splitlines()[-1])
            assert (got["reward"], got["details"]["done"]) == (0.0, False), got
        finally:
            await box.close()


async def test_browser_agent_goto_a_forged_page_scores_zero_on_podman(
    gui_image: str, scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    gateway = scripted_gateway([f"Action: Goto; {FORGED_MINIWOB}"])
    config = RolloutConfig(
        tasks=[miniwob_task("click-button", 3)],
        harness="browser-agent",
        harness_options={"max_steps": 2},
        gateway_url=gateway,
        backend="podman",
        backend_options={"gui_image": gui_image},
        out_dir=tmp_path / "run",
        retries=0,
    )
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward) == ("agent_error", 0.0), res


async def test_the_users_browser_task_runs_from_its_file_on_podman(
    gui_image: str, scripted_gateway: Callable[[list[str]], str], tmp_path: Path
) -> None:
    # docs/environments.md's example (a task.toml with [browser]), as on the local backend.
    (task,) = load_tasks(Path(__file__).parent / "samples" / "newsletter-signup").tasks
    for name, replies, reward in (
        ("solve", ["Action: Type [3]; ada@example.org", "Action: Click [4]"], 1.0),
        ("noop", ["Action: Answer; done"], 0.0),
    ):
        config = RolloutConfig(
            tasks=[task],
            harness="browser-agent",
            harness_options={"max_steps": 4},
            gateway_url=scripted_gateway(replies),
            backend="podman",
            backend_options={"gui_image": gui_image},
            out_dir=tmp_path / name,
            retries=0,
        )
        (res,) = await run_rollouts(config)
        assert (res.status, res.reward, res.error) == ("completed", reward, None), res
