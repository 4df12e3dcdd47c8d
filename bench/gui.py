"""The browser environment's costs per sandbox, and how many browser sandboxes 2 cores hold.

Run: ``.venv/bin/python bench/gui.py [--quick]``.

For one MiniWoB page (click-button) in a local bubblewrap sandbox it measures: sandbox
create to first screenshot, screenshots/s (plain and set-of-marks), accessibility-tree
observations/s, actions/s (a key press: it does not end the episode) and the memory of the
sandbox's processes (sum of PSS, so Chromium's shared pages count once). Baseline in the
same run: the same page, observations and actions through Playwright on the host, no
sandbox and no environment server. Then K sandboxes at once (each looping observe → act
for a fixed time): steps/s in all and each step's p50/p95, to show where 2 cores saturate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from openforge.environments import browser
from openforge.sandboxes.base import Sandbox, SandboxSpec
from openforge.sandboxes.local import LocalBackend
from openforge.suites.miniwob.loader import miniwob_task

HOME = "/home/sandbox"
TASK = ("click-button", 1)

# Runs inside the sandbox: timings of the environment server's API, as JSON on stdout.
CLIENT = r"""
import json, os, sys, time, urllib.request
u = os.environ["OPENFORGE_BROWSER_URL"]
def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(u + path, data=data, headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
out = {}
call("/observation?mode=screenshot")
out["first_shot_at"] = time.time()
n = int(os.environ["N"])
for mode in ("screenshot", "som", "axtree"):
    call("/observation?mode=" + mode)  # warm-up, as the baseline does
    t = time.perf_counter()
    for _ in range(n):
        call("/observation?mode=" + mode)
    out[mode + "_per_s"] = n / (time.perf_counter() - t)
t = time.perf_counter()
for _ in range(n):
    call("/action", {"action": "key", "key": "Tab"})
out["actions_per_s"] = n / (time.perf_counter() - t)
if os.environ.get("HOLD"):
    open(os.environ["HOLD"], "w").write("ready")
    time.sleep(float(os.environ.get("HOLD_S", "3")))
steps, lat = 0, []
end = time.perf_counter() + float(os.environ.get("LOOP_S", "0"))
while time.perf_counter() < end:
    t = time.perf_counter()
    call("/observation?mode=axtree")
    call("/action", {"action": "key", "key": "Tab"})
    lat.append(time.perf_counter() - t)
out["loop_steps"] = len(lat)
out["loop_latencies"] = lat
print(json.dumps(out))
"""


def _pss_kb(sid: str) -> int:
    """Sum of PSS of the processes whose environment names sandbox ``sid``."""
    marker = f"OPENFORGE_SANDBOX_ID={sid}".encode()
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            for line in Path(f"/proc/{entry}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


async def _sandbox(backend: LocalBackend) -> Sandbox:
    task = miniwob_task(*TASK)
    assert task.gui is not None
    box = await backend.create(SandboxSpec(network="none", host_paths=task.gui.host_paths()))
    await box.put({**task.workspace_bytes(), "client.py": CLIENT.encode()})
    await task.gui.prepare(box, HOME)
    return box


async def one_sandbox(backend: LocalBackend, n: int) -> dict[str, Any]:
    """Create → first screenshot, API rates and memory for one browser sandbox."""
    t0 = time.time()
    box = await _sandbox(backend)
    hold = f"{HOME}/hold"
    run = asyncio.create_task(
        box.exec(
            browser.wrap_argv(["python3", "client.py"], HOME),
            env={"N": str(n), "HOLD": hold, "HOLD_S": "3"},
            timeout=600,
        )
    )
    pss = 0
    while not run.done():
        if await box.get([hold]):
            await asyncio.sleep(1.0)  # settled after the bursts
            pss = _pss_kb(box.id)
            break
        await asyncio.sleep(0.1)
    res = await run
    await box.close()
    if res.exit_code != 0:
        raise SystemExit(f"sandbox client failed: {res.stderr.decode()[-2000:]}")
    out: dict[str, Any] = json.loads(res.stdout.decode().splitlines()[-1])
    out["create_to_first_shot_s"] = out.pop("first_shot_at") - t0
    out["pss_mb"] = pss / 1024
    out.pop("loop_latencies")
    return out


def host_baseline(n: int) -> dict[str, Any]:
    """The same work through Playwright on the host: no sandbox, no server, no HTTP."""
    task = miniwob_task(*TASK)
    assert isinstance(task.gui, browser.BrowserEnvironment)
    d = Path(tempfile.mkdtemp())
    for rel, p in task.workspace.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, d / rel)
    from openforge.guest import browser_server

    config = asdict(task.gui)
    config["chromium"] = browser.chromium_path()
    cwd = os.getcwd()
    os.chdir(d)
    try:
        t0 = time.time()
        env = browser_server.BrowserEnv(config, str(d / "result.json"))
        env.page.screenshot()
        out: dict[str, Any] = {"create_to_first_shot_s": time.time() - t0}
        for mode in ("screenshot", "som", "axtree"):
            env.observe(mode)  # warm-up
            t = time.perf_counter()
            for _ in range(n):
                env.observe(mode)
            out[mode + "_per_s"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(n):
            env.act({"action": "key", "key": "Tab"})
        out["actions_per_s"] = n / (time.perf_counter() - t)
        env.close()
    finally:
        os.chdir(cwd)
        shutil.rmtree(d, ignore_errors=True)
    return out


async def concurrent(backend: LocalBackend, k: int, loop_s: float) -> dict[str, Any]:
    """K browser sandboxes at once, each looping observe → act for ``loop_s`` seconds."""
    boxes = [await _sandbox(backend) for _ in range(k)]
    argv = browser.wrap_argv(["python3", "client.py"], HOME)
    env = {"N": "1", "LOOP_S": str(loop_s)}
    results = await asyncio.gather(*(b.exec(argv, env=env, timeout=600) for b in boxes))
    for b in boxes:
        await b.close()
    lat: list[float] = []
    steps = 0
    for res in results:
        if res.exit_code != 0:
            raise SystemExit(f"sandbox client failed: {res.stderr.decode()[-2000:]}")
        data = json.loads(res.stdout.decode().splitlines()[-1])
        lat += data["loop_latencies"]
        steps += data["loop_steps"]
    lat.sort()
    return {
        "sandboxes": k,
        "steps_per_s": steps / loop_s,
        "step_p50_ms": 1000 * statistics.median(lat),
        "step_p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))],
    }


async def measure(base: dict[str, Any], n: int, loop_s: float, ks: tuple[int, ...]) -> None:
    """The sandboxed measurements, printed beside the host baseline."""
    with tempfile.TemporaryDirectory() as root:
        backend = LocalBackend(root=Path(root))
        try:
            one = await one_sandbox(backend, n)
            print(f"{'':28}{'sandbox':>10}{'host baseline':>16}")
            for key in (
                "create_to_first_shot_s",
                "screenshot_per_s",
                "som_per_s",
                "axtree_per_s",
                "actions_per_s",
            ):
                print(f"{key:28}{one[key]:>10.2f}{base[key]:>16.2f}")
            print(f"{'memory per sandbox (PSS MB)':28}{one['pss_mb']:>10.0f}")
            print(f"\nconcurrent sandboxes, observe(axtree) + key per step, {loop_s:g} s each")
            for k in ks:
                r = await concurrent(backend, k, loop_s)
                print(
                    f"K={k:<3} steps/s {r['steps_per_s']:7.2f}   p50 {r['step_p50_ms']:7.1f} ms"
                    f"   p95 {r['step_p95_ms']:7.1f} ms"
                )
        finally:
            await backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, K up to 4")
    args = ap.parse_args()
    n = 10 if args.quick else 30
    loop_s = 8.0 if args.quick else 20.0
    ks = (1, 2, 4) if args.quick else (1, 2, 4, 8, 12, 16)
    print(f"cores: {os.cpu_count()}  page: MiniWoB {TASK[0]}  repeats: {n}")
    base = host_baseline(n)  # Playwright's sync API: before the event loop starts
    asyncio.run(measure(base, n, loop_s, ks))


if __name__ == "__main__":
    main()
