"""The red team against OpenForge's own verifier contract (issue 39, the claw setting): one
scripted hostile policy per known shortcut, each run as the agent's turn through the real
orchestrator, shell harness and sandboxes (local bubblewrap and podman); every one must end
``completed`` with the reward the honest verifier gives what it left, never more and never
``infra_error``. The policies are in ``agents/red_team.py``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.suites import load_tasks
from openforge.tasks import Task

from .agents.red_team import ADD_VERIFIER, POLICIES

pytestmark = pytest.mark.slow


def _add_task(root: Path) -> Task:
    d = root / "add"
    (d / "verify").mkdir(parents=True)
    (d / "workspace").mkdir()
    (d / "workspace" / "README").write_text("Write add.py: print the sum of its two arguments.\n")
    (d / "task.toml").write_text(
        'id = "add"\ninstruction = "Write add.py that prints the sum of its two arguments."\n'
        "timeout = 60\n[verify]\ntimeout = 20\n"
    )
    (d / "verify" / "verify.py").write_text(ADD_VERIFIER)
    return load_tasks(d).tasks[0]


def _tasks(root: Path) -> list[Task]:
    """One task per policy (its script in the workspace as policy.sh)."""
    base = {
        "count-lines": load_tasks("claw-mini").by_id()["count-lines"],
        "add": _add_task(root / "tasks"),
    }
    tasks = []
    for name, policy in POLICIES.items():
        script = root / "policies" / f"{name}.sh"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(policy.script)
        task = base[policy.task]
        tasks.append(
            dataclasses.replace(
                task,
                id=f"{policy.task}--{name}",
                workspace={**task.workspace, "policy.sh": script},
                # A stalled verifier is cut off at its timeout: keep the stall short.
                verify_timeout_s=min(task.verify_timeout_s, 8.0),
            )
        )
    return tasks


@pytest.mark.parametrize("backend", ["local", "podman"])
async def test_every_shortcut_ends_with_the_honest_verifiers_reward(
    gateway: str, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "podman":
        request.getfixturevalue("podman_images")  # built once per session
    options = {} if backend == "podman" else {"root": tmp_path / "boxes"}
    config = RolloutConfig(
        tasks=_tasks(tmp_path), harness="shell", harness_options={"command": "sh policy.sh"},
        gateway_url=gateway, backend=backend, backend_options=options,
        out_dir=tmp_path / "run", retries=0, concurrency=4,
    )  # fmt: skip
    results = {r.task_id.split("--", 1)[1]: r for r in await run_rollouts(config)}
    assert results.keys() == POLICIES.keys()
    wrong = {
        name: (r.status, r.reward, r.error, (r.verifier_output or "")[-600:])
        for name, r in results.items()
        if (r.status, r.reward) != ("completed", POLICIES[name].reward)
    }
    assert not wrong, wrong
    # The verifier's files and the reference solution are nowhere in the sandbox during the
    # agent's turn.
    log = (tmp_path / "run" / "rollouts" / "count-lines--peek" / "0" / "agent.log").read_text()
    seen = log.split("PEEK-BEGIN", 1)[1].split("PEEK-END", 1)[0]
    assert "openforge_verify" not in seen and "pristine" not in seen, seen
    assert "tr -d" not in seen, seen  # solve.sh's command
    # Failures the agent caused say so, and are not an infrastructure error.
    for name in ("fifo-stalls-verifier", "program-attacks-verifier"):
        details = results[name].details
        assert isinstance(details, dict) and "verifier_failed" in details, (name, details)
    # What was undone before the verifier ran is in its log.
    for name, note in (("verify-dir-symlink", "symlink"), ("chmod-workspace", "mode")):
        assert note in (results[name].verifier_output or ""), (name, results[name])
