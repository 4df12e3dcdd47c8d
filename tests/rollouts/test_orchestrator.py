"""The orchestrator end to end: real gateway subprocess, real bubblewrap sandboxes, real
shell harnesses."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from openforge.rollouts import RolloutConfig, load_results, run_rollouts
from openforge.sandboxes import create_backend
from openforge.sandboxes.disk import loop_disks_available
from openforge.suites import load_tasks
from openforge.tasks import Task

from .conftest import admin_headers

# Calls the gateway once (OpenAI Chat) and writes the model's reply to hello.txt.
CALL_AND_WRITE = (
    'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    "-H 'content-type: application/json' "
    '-d "{\\"model\\": \\"$OPENFORGE_MODEL\\", \\"messages\\": [{\\"role\\": \\"user\\", '
    '\\"content\\": \\"say hello\\"}]}" > /tmp/reply.json && '
    'python3 -c \'import json; print(json.load(open("/tmp/reply.json"))'
    '["choices"][0]["message"]["content"])\' > hello.txt'
)


def hello_task() -> Task:
    return load_tasks("claw-mini").by_id()["hello-file"]


def native_task(
    root: Path,
    task_id: str,
    timeout: int = 60,
    verify: str = "import json; print(json.dumps({'reward': 1.0}))",
) -> Task:
    d = root / task_id
    (d / "verify").mkdir(parents=True)
    (d / "task.toml").write_text(f'id = "{task_id}"\ninstruction = "x"\ntimeout = {timeout}\n')
    (d / "verify" / "verify.py").write_text(verify)
    return load_tasks(d).tasks[0]


def config(
    gateway: str, tmp_path: Path, tasks: list[Task], command: str, **kw: Any
) -> RolloutConfig:
    opts: dict[str, Any] = {
        "n": 1,
        "concurrency": 4,
        "retry_backoff_s": 0.0,
        "backend_options": {"root": tmp_path / "sandboxes"},
    }
    opts.update(kw)
    return RolloutConfig(
        tasks=tasks,
        harness="shell",
        harness_options={"command": command},
        gateway_url=gateway,
        out_dir=tmp_path / "run",
        **opts,
    )


def admin(gateway: str, rollout_id: str) -> dict[str, object]:
    url = f"{gateway}/admin/rollouts/{rollout_id}"
    data: dict[str, object] = httpx.get(url, headers=admin_headers()).json()
    return data


async def test_harness_that_calls_the_gateway_and_writes_the_file_scores_1(
    gateway: str, tmp_path: Path
) -> None:
    (res,) = await run_rollouts(config(gateway, tmp_path, [hello_task()], CALL_AND_WRITE))
    assert (res.status, res.reward, res.attempts, res.error) == ("completed", 1.0, 1, None)
    rec = admin(gateway, str(res.rollout_id))
    assert rec["status"] == "completed" and rec["reward"] == 1.0
    assert rec["group_id"] == res.group_id and rec["task_id"] == "hello-file"
    # The store keeps the run and the task's split, so readers keep held-out data apart.
    assert rec["split"] == "train" and str(res.group_id).startswith(f"{rec['run_id']}/")
    listed = httpx.get(
        f"{gateway}/admin/rollouts",
        params={"run_id": str(rec["run_id"]), "split": "train"},
        headers=admin_headers(),
    ).json()["rollouts"]
    assert [r["id"] for r in listed] == [res.rollout_id]
    none = httpx.get(
        f"{gateway}/admin/rollouts",
        params={"run_id": str(rec["run_id"]), "split": "test"},
        headers=admin_headers(),
    ).json()["rollouts"]
    assert none == []
    assert len(rec["calls"]) == 1  # type: ignore[arg-type]
    lines = (tmp_path / "run" / "results.jsonl").read_bytes().splitlines()
    assert orjson.loads(lines[0])["rollout_id"] == res.rollout_id
    assert res.timings.keys() >= {"create", "setup", "agent", "verify", "teardown", "total"}
    assert not list((tmp_path / "sandboxes").iterdir())


async def test_wrong_file_scores_0_and_groups_are_per_task(gateway: str, tmp_path: Path) -> None:
    results = await run_rollouts(
        config(gateway, tmp_path, [hello_task()], "echo goodbye > hello.txt", n=3)
    )
    assert [(r.status, r.reward, r.sample) for r in results] == [
        ("completed", 0.0, i) for i in range(3)
    ]
    assert len({r.group_id for r in results}) == 1
    assert len({r.rollout_id for r in results}) == 3
    assert admin(gateway, str(results[0].rollout_id))["reward"] == 0.0


async def test_hanging_harness_is_killed_at_the_timeout(gateway: str, tmp_path: Path) -> None:
    marker = "7391.25"
    task = native_task(tmp_path / "tasks", "hang", timeout=1)
    (res,) = await run_rollouts(
        config(gateway, tmp_path, [task], f"sleep {marker} & sleep {marker}; wait")
    )
    assert res.status == "timeout" and res.reward == 1.0 and "timeout" in str(res.error)
    assert admin(gateway, str(res.rollout_id))["status"] == "timeout"
    assert not _processes_with(marker)


async def test_agent_error_and_verifier_garbage(gateway: str, tmp_path: Path) -> None:
    bad_verifier = native_task(tmp_path / "tasks", "garbage", verify="print('all good!')")
    crash = native_task(tmp_path / "tasks", "crash", verify="raise SystemExit(3)")
    ok = native_task(tmp_path / "tasks", "ok")
    results = await run_rollouts(
        config(gateway, tmp_path, [bad_verifier, crash, ok], "echo oops >&2; exit 4")
    )
    by = {r.task_id: r for r in results}
    assert (by["ok"].status, by["ok"].reward, by["ok"].agent_exit_code) == ("agent_error", 1.0, 4)
    for tid in ("garbage", "crash"):
        assert by[tid].status == "infra_error" and by[tid].reward is None
        assert by[tid].attempts == 1 and "verifier" in str(by[tid].error)
        assert admin(gateway, str(by[tid].rollout_id))["status"] == "infra_error"
    assert "all good!" in str(by["garbage"].verifier_output)
    run = tmp_path / "run" / "rollouts"
    assert "all good!" in (run / "garbage" / "0" / "verifier.log").read_text()
    assert b"oops" in (run / "ok" / "0" / "agent.log").read_bytes()


async def test_sandbox_creation_failure_is_infra_error_after_retries(
    gateway: str, tmp_path: Path
) -> None:
    root = tmp_path / "broken-root"
    backend = create_backend("local", root=root)
    root.rmdir()
    root.write_text("not a directory")  # every create now fails inside the real backend
    try:
        (res,) = await run_rollouts(
            config(gateway, tmp_path, [hello_task()], CALL_AND_WRITE, backend=backend, retries=2)
        )
    finally:
        await backend.close()
    assert (res.status, res.reward, res.attempts) == ("infra_error", None, 3)
    assert "sandbox create" in str(res.error)
    listed = httpx.get(
        f"{gateway}/admin/rollouts", params={"group_id": res.group_id}, headers=admin_headers()
    ).json()
    assert [r["status"] for r in listed["rollouts"]] == ["infra_error"] * 3


async def test_rerun_skips_finished_rollouts(gateway: str, tmp_path: Path) -> None:
    cfg = config(gateway, tmp_path, [hello_task()], "echo goodbye > hello.txt", n=2)
    first = await run_rollouts(cfg)
    again = await run_rollouts(config(gateway, tmp_path, [hello_task()], "exit 1", n=3))
    assert [r.rollout_id for r in again[:2]] == [r.rollout_id for r in first]
    assert again[2].status == "agent_error"
    assert len(load_results(tmp_path / "run")) == 3
    lines = (tmp_path / "run" / "results.jsonl").read_bytes().splitlines()
    assert len(lines) == 3


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd:
                found.append(int(pid))
    return found


@pytest.fixture
def processes_with() -> object:
    return _processes_with


@pytest.mark.skipif(
    os.geteuid() != 0 or not loop_disks_available(),
    reason="the total-disk limit needs root and loop devices",
)
async def test_agent_that_fills_its_disk_fails_as_itself_not_as_infra(
    gateway: str, tmp_path: Path
) -> None:
    d = tmp_path / "tasks" / "fill"
    (d / "verify").mkdir(parents=True)
    (d / "task.toml").write_text(
        'id = "fill"\ninstruction = "x"\ntimeout = 60\n[resources]\ndisk_mb = 48\n'
    )
    (d / "verify" / "verify.py").write_text(
        "import json, os; print(json.dumps({'reward': float(os.path.exists('done'))}))"
    )
    task = load_tasks(d).tasks[0]
    fill = "dd if=/dev/zero of=big bs=1M count=500 status=none && touch done"
    (res,) = await run_rollouts(config(gateway, tmp_path, [task], fill))
    assert (res.status, res.reward, res.attempts) == ("agent_error", 0.0, 1)
    agent_log = (tmp_path / "run" / "rollouts" / "fill" / "0" / "agent.log").read_text()
    assert "No space left on device" in agent_log
    assert admin(gateway, str(res.rollout_id))["status"] == "agent_error"
