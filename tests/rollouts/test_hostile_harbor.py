"""Hostile agents on Harbor and Terminal-Bench tasks, through the real orchestrator on podman
(these tasks bring their own image: the local backend refuses them).

Each scripted policy (``agents/harbor_hostile.py``) tries one way to write its own reward —
a background writer racing the verifier, forged files planted where the tests go, a program
the tests run that kills them, floods the reward file, writes a second reward or never
returns, a verifier made unable to run, a look for the tests and the solution. Every one must
end with the honest verifier's 0: never more, and never ``infra_error`` (masked from
training, so a failure hidden as one would be an escape from every negative reward).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.sandboxes import create_backend
from openforge.suites import load_tasks
from openforge.tasks import Task
from openforge.tasks.oracle import check_task
from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

from .conftest import admin_headers

pytestmark = pytest.mark.slow
AGENT = Path(__file__).parent / "agents" / "harbor_hostile.py"
MODES = ("background", "peek", "kill", "disagree", "flood", "stall", "break")


def _config(gateway: str, tmp_path: Path, tasks: list[Task], command: str) -> RolloutConfig:
    return RolloutConfig(
        tasks=tasks, harness="shell", harness_options={"command": command},
        gateway_url=gateway, backend="podman", backend_options={"base_images": samples.BASE_IMAGES},
        out_dir=tmp_path / "run", retries=0, concurrency=3,
    )  # fmt: skip


def _seen(run: Path, task_id: str) -> dict[str, object]:
    log = (run / "rollouts" / task_id / "0" / "agent.log").read_text()
    return next(orjson.loads(x) for x in log.splitlines() if x.startswith('{"mode"'))


async def test_every_hostile_policy_gets_the_honest_zero(
    gateway: str, podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))  # no cached verdicts
    (task,) = load_tasks(samples.harbor_runs_agent_code(tmp_path / "suite")).tasks
    tasks = []
    for mode in MODES:
        (tmp_path / "modes" / mode).mkdir(parents=True)
        (tmp_path / "modes" / mode / "mode.txt").write_text(mode)
        workspace = {"harbor_hostile.py": AGENT, "mode.txt": tmp_path / "modes" / mode / "mode.txt"}
        tasks.append(dataclasses.replace(task, id=f"hostile-{mode}", workspace=workspace))
    results = await run_rollouts(_config(gateway, tmp_path, tasks, "python3 harbor_hostile.py"))
    by = {r.task_id.removeprefix("hostile-"): r for r in results}
    for mode, res in by.items():
        assert (res.status, res.reward) == ("completed", 0.0), (mode, res.error, res)
        record = httpx.get(f"{gateway}/admin/rollouts/{res.rollout_id}", headers=admin_headers())
        assert record.json()["reward"] == 0.0, (mode, record.json())
    # What held each one: the verifier's own 0, or its failure shown to be the agent's doing.
    assert "killed (signal 9)" in str(by["kill"].error)
    assert "reward.json says 1 but reward.txt says 0" in str(by["disagree"].error)
    assert "larger than 65536 bytes" in str(by["flood"].error)
    assert "ran past 10s" in str(by["stall"].error)
    assert "cannot start bash" in str(by["break"].error)
    assert by["background"].error is None and by["peek"].error is None
    assert _seen(tmp_path / "run", "hostile-peek")["found"] == []
    # The same task done honestly still scores 1 (the hardening took nothing from it).
    honest = dataclasses.replace(task, id="honest")
    solve = (
        "wc -l < data.txt > count.txt && "
        "echo \"print(len(open('/app/data.txt').read().splitlines()))\" > count.py"
    )
    (res,) = await run_rollouts(_config(gateway, tmp_path / "honest", [honest], solve))
    assert (res.status, res.reward) == ("completed", 1.0), res


async def test_terminal_bench_image_carries_neither_tests_nor_solution(
    gateway: str, podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task's Dockerfile copies its whole directory into /app: the tests, run-tests.sh
    and solution.sh there stay out of the image, and the task still checks out (oracle 1,
    no-op 0) with its tests put in place only for the verifier."""
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    (task,) = load_tasks(samples.terminal_bench_copy_all(tmp_path / "suite")).tasks
    mode = tmp_path / "mode.txt"
    mode.write_text("peek")
    task = dataclasses.replace(task, workspace={"harbor_hostile.py": AGENT, "mode.txt": mode})
    (res,) = await run_rollouts(_config(gateway, tmp_path, [task], "python3 harbor_hostile.py"))
    assert res.status == "completed" and res.reward == 0.0, res
    seen = _seen(tmp_path / "run", task.id)
    assert seen["found"] == [] and "data.txt" in seen["here"], seen  # type: ignore[operator]
    backend = create_backend("podman", base_images=samples.BASE_IMAGES)
    try:
        checked = await check_task(backend, task)
    finally:
        await backend.close()
    assert (checked.ok, checked.oracle, checked.noop) == (True, 1.0, 0.0), checked


async def test_an_agent_cannot_fail_a_later_steps_healthcheck_into_infra_error(
    gateway: str, podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step two's healthcheck needs what step one's agent had to make. An agent that makes
    nothing, or removes ``sh`` so the healthcheck cannot even start, fails it after its own
    turn: the rollout is scored (0), never masked as ``infra_error``; the honest agent gets 1."""
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    (task,) = load_tasks(samples.harbor_healthcheck(tmp_path / "suite")).tasks
    policies = {
        "idle": "true",
        "no-sh": "rm -f /bin/sh /usr/bin/sh /bin/dash /usr/bin/dash",
        "honest": (
            'case "$OPENFORGE_INSTRUCTION" in *Harbor*) g="Hello, Harbor!";; *) g=hello;; esac; '
            'printf \'#!/bin/sh\\necho "%s"\\n\' "$g" > /app/greet.sh; chmod +x /app/greet.sh'
        ),
    }
    results = {}
    for name, command in policies.items():
        one = dataclasses.replace(task, id=f"steps-{name}")
        (res,) = await run_rollouts(_config(gateway, tmp_path / name, [one], command))
        results[name] = res
    for name in ("idle", "no-sh"):
        res = results[name]
        assert (res.status, res.reward) == ("completed", 0.0), (name, res.error, res)
    assert (results["honest"].status, results["honest"].reward) == ("completed", 1.0)
