"""Harnesses on the podman backend: the built-in claw agent on a claw-mini task, a shell
harness on a Harbor task in its own image, and Claude Code, Codex, OpenClaw and mini-swe-agent
(their portable installs) completing a Harbor task in its own image — the gateway-only
network included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harnesses.conftest import require
from openforge.harnesses.registry import get_harness
from openforge.probing.probe import SOLUTIONS, hello_task, probe, tool_reply
from openforge.rollouts import RolloutConfig, run_rollouts
from openforge.sandboxes.runtime import RT_PYTHON
from openforge.suites import load_tasks
from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

pytestmark = pytest.mark.slow
DONE = {"text": "Done."}


def _log(run_dir: Path, task_id: str) -> str:
    """The tail of the rollout's agent log, for a failure message (none after an infra error)."""
    log = run_dir / f"rollouts/{task_id}/0/agent.log"
    return log.read_text()[-3000:] if log.exists() else ""


async def test_claw_completes_a_claw_mini_task_in_a_container(
    gateway: str, podman_images: dict[str, str], tmp_path: Path
) -> None:
    task = load_tasks("claw-mini").by_id()["hello-file"]
    config = RolloutConfig(
        tasks=[task], harness="claw", gateway_url=gateway, backend="podman",
        out_dir=tmp_path / "run", retries=0,
    )  # fmt: skip
    (res,) = await run_rollouts(config)
    # The scripted engine answers "hello" with no tool call: the agent ends, nothing written.
    assert (res.status, res.reward, res.error) == ("completed", 0.0, None), res


async def test_shell_harness_in_a_harbor_task_image(
    gateway: str, podman_images: dict[str, str], tmp_path: Path
) -> None:
    tasks = load_tasks(samples.harbor_pytest(tmp_path / "suite")).tasks
    tasks += load_tasks(samples.harbor_broken(tmp_path / "suite")).tasks
    config = RolloutConfig(
        tasks=tasks, harness="shell",
        harness_options={"command": "wc -l < data.txt > count.txt"},
        gateway_url=gateway, backend="podman",
        backend_options={"base_images": samples.BASE_IMAGES},
        out_dir=tmp_path / "run", retries=0,
    )  # fmt: skip
    by = {r.task_id: r for r in await run_rollouts(config)}
    good, broken = by["samples-count-lines"], by["no-pytest"]
    assert (good.status, good.reward) == ("completed", 1.0), good
    assert (broken.status, broken.reward) == ("infra_error", None), broken
    assert "pytest: command not found" in (broken.error or "")


async def test_a_task_with_its_own_environment_on_the_local_backend_is_infra_error(
    gateway: str, tmp_path: Path
) -> None:
    tasks = load_tasks(samples.harbor_pytest(tmp_path / "suite")).tasks
    config = RolloutConfig(
        tasks=tasks, harness="shell", harness_options={"command": "touch ran"},
        gateway_url=gateway, backend_options={"root": tmp_path / "sandboxes"},
        out_dir=tmp_path / "run", retries=2,
    )  # fmt: skip
    (res,) = await run_rollouts(config)
    assert (res.status, res.reward, res.attempts) == ("infra_error", None, 1)
    assert "--backend podman" in (res.error or "")


async def test_claw_in_a_task_image_without_python_uses_the_runtime_python(
    gateway: str, podman_images: dict[str, str], tmp_path: Path
) -> None:
    d = samples.harbor_pytest(tmp_path / "suite", "bare")
    (d / "environment" / "Dockerfile").write_text(samples.BARE_DOCKERFILE)
    (d / "tests" / "test.sh").write_text(
        '[ "$(cat /app/count.txt 2>/dev/null)" = 3 ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    tasks = load_tasks(tmp_path / "suite").tasks
    config = RolloutConfig(
        tasks=tasks, harness="claw", harness_options={"python": RT_PYTHON},
        gateway_url=gateway, backend="podman",
        backend_options={"base_images": samples.BASE_IMAGES},
        out_dir=tmp_path / "run", retries=0,
    )  # fmt: skip
    (res,) = await run_rollouts(config)
    # The scripted engine answers "hello" with no tool call: the agent ends, nothing written.
    assert (res.status, res.reward, res.error) == ("completed", 0.0, None), res


COUNT = "wc -l < /app/data.txt > /app/count.txt"
# Per harness: its own shell tool writes the answer, then it ends (scripted engine).
COUNT_SCRIPTS = {
    "claude-code": [tool_reply("Bash", command=COUNT, description="Count lines"), DONE],
    "codex": [tool_reply("exec_command", cmd=COUNT), DONE],
    "openclaw": [tool_reply("exec", command=COUNT), DONE],
    "mini-swe-agent": [
        tool_reply("bash", command=COUNT),
        tool_reply("bash", command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ],
}


@pytest.mark.parametrize("name", sorted(COUNT_SCRIPTS))
async def test_each_harness_completes_a_harbor_task_in_its_own_image(
    name: str, podman_images: dict[str, str], tmp_path: Path
) -> None:
    """The task's Dockerfile (Debian, pytest, no Node, no harness) is built unedited; the
    harness comes as its portable install, mounted read-only, and reaches the gateway over
    the gateway-only network; the verifier sees what its shell tool left in /app."""
    require(name)
    (task,) = load_tasks(samples.harbor_pytest(tmp_path / "suite")).tasks
    # Node harnesses need more room than the sample's 512 MB, and time to start under load.
    task = dataclasses.replace(task, memory_mb=2048, timeout_s=300.0)
    run = await probe(
        get_harness(name), COUNT_SCRIPTS[name], tmp_path / "run", task=task,
        backend="podman", backend_options={"base_images": samples.BASE_IMAGES},
    )  # fmt: skip
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        _log(run.run_dir, task.id),
    )
    # The model's calls went through the gateway, the tool call among them.
    assert len(run.calls) >= 2 and all(c.status == "ok" for c in run.calls)


@pytest.mark.parametrize("name", sorted(COUNT_SCRIPTS))
async def test_each_harness_completes_a_claw_mini_task_in_the_sandbox_image(
    name: str, podman_images: dict[str, str], tmp_path: Path
) -> None:
    """The same portable installs in OpenForge's own minimal sandbox image (no task image):
    claw-mini's hello-file, solved with each harness's own file or shell tool."""
    require(name)
    run = await probe(
        get_harness(name), SOLUTIONS[name], tmp_path / "run", task=hello_task(timeout_s=300.0),
        backend="podman",
    )  # fmt: skip
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        _log(run.run_dir, "hello-file"),
    )


async def test_claude_code_calls_a_harbor_tasks_own_mcp_server(
    podman_images: dict[str, str], tmp_path: Path
) -> None:
    """A Harbor task's own MCP server (``[[environment.mcp_servers]]``, streamable-http, up in
    its image) reaches Claude Code as ``mcp__secrets``, through the bridge's relay: the tool's
    answer (the secret only the server holds) is in what the harness recorded."""
    require("claude-code")
    (task,) = load_tasks(samples.harbor_mcp(tmp_path / "suite")).tasks
    task = dataclasses.replace(task, memory_mb=2048, timeout_s=300.0)
    write = "echo forge-secret-7 > /app/secret.txt"
    replies = [
        tool_reply("mcp__secrets__get_secret"),
        tool_reply("Bash", command=write, description="Write the secret"),
        DONE,
    ]
    run = await probe(
        get_harness("claude-code"), replies, tmp_path / "run", task=task,
        backend="podman", backend_options={"base_images": samples.BASE_IMAGES},
    )  # fmt: skip
    assert (run.result.status, run.result.reward) == ("completed", 1.0), (
        run.result,
        _log(run.run_dir, task.id),
    )
    recorded = "".join(
        p.read_text(errors="replace")
        for p in (run.run_dir / "rollouts" / task.id / "0").rglob("*")
        if p.is_file()
    )
    # The Bash tool's result is empty (its echo went to a file): a tool result holding the
    # secret is the MCP server's answer.
    results = [line for line in recorded.splitlines() if "tool_result" in line]
    assert any("forge-secret-7" in line for line in results), results
