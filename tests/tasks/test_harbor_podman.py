"""Harbor and Terminal-Bench tasks in their own images, built and run with real podman.

Every task here is hand-written in the published layouts (``harbor_samples.py``); their
Dockerfiles say ``FROM debian:bookworm`` and are built FROM the local debootstrap base.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.environments.services import McpRelay
from openforge.harnesses.base import HarnessError
from openforge.harnesses.claude_code import ClaudeCodeHarness
from openforge.harnesses.codex import CodexHarness
from openforge.harnesses.openclaw import OpenClawHarness
from openforge.rollouts.runner import add_skills
from openforge.sandboxes import create_backend
from openforge.sandboxes.container import ContainerBackend
from openforge.sandboxes.images import base_images_from_env
from openforge.suites import load_tasks
from openforge.tasks.episode import Turn, TurnOutcome, run_episode, sandbox_spec
from openforge.tasks.grading import VerifierError
from openforge.tasks.oracle import check_task

from . import harbor_samples as samples

pytestmark = pytest.mark.slow
# The container's memory limit: cgroup v2's file, else v1's (this machine's podman is v1).
_MEMORY_MAX = (
    "/sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
)


@pytest.fixture
async def podman(
    podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ContainerBackend]:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))  # a fresh verdict cache
    bases = {**base_images_from_env(), **samples.BASE_IMAGES}
    backend = create_backend("podman", base_images=bases)
    assert isinstance(backend, ContainerBackend)
    yield backend
    await backend.close()


@pytest.mark.parametrize(
    "make",
    [samples.harbor_pytest, samples.harbor_multikey, samples.harbor_steps, samples.terminal_bench,
     samples.harbor_entrypoint],
)  # fmt: skip
async def test_oracle_scores_1_and_noop_scores_0(
    podman: ContainerBackend, tmp_path: Path, make: object
) -> None:
    (task,) = load_tasks(make(tmp_path)).tasks  # type: ignore[operator]
    result = await check_task(podman, task)
    assert (result.ok, result.oracle, result.noop, result.reason) == (True, 1.0, 0.0, "")
    again = await check_task(podman, task)
    assert again.cached and again.ok


async def test_verifier_that_cannot_run_is_infra_error_not_0(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    (task,) = load_tasks(samples.harbor_broken(tmp_path)).tasks
    spec = sandbox_spec(task, "/workspace")
    box = await podman.create(spec)
    try:

        async def noop(turn: Turn) -> TurnOutcome:
            return TurnOutcome()

        with pytest.raises(VerifierError, match="pytest: command not found"):
            await run_episode(box, task, spec.workdir, noop)
    finally:
        await box.close()
    result = await check_task(podman, task)
    assert not result.ok and result.oracle is None and "could not run" in result.reason


async def test_multikey_reward_json_keeps_every_key(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    (task,) = load_tasks(samples.harbor_multikey(tmp_path)).tasks
    spec = sandbox_spec(task, "/workspace")
    box = await podman.create(spec)
    try:

        async def half(turn: Turn) -> TurnOutcome:  # right count, no NOTES.md
            await box.exec(["sh", "-c", "wc -l < data.txt > count.txt"], cwd=spec.workdir)
            return TurnOutcome()

        episode = await run_episode(box, task, spec.workdir, half)
    finally:
        await box.close()
    assert episode.reward == 0.5
    assert episode.details["rewards"] == {"correctness": 1.0, "style": 0.0}


async def test_workdir_env_and_limits_reach_the_container(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    (task,) = load_tasks(samples.harbor_pytest(tmp_path)).tasks
    spec = sandbox_spec(task, "/workspace")
    assert spec.workdir == "/app" and spec.cpu == 1.0 and spec.memory_mb == 512
    box = await podman.create(spec)
    try:
        res = await box.exec(["sh", "-c", f"pwd; echo $GREETING; cat {_MEMORY_MAX}; ls"])
    finally:
        await box.close()
    pwd, greeting, memory, *files = res.stdout.decode().split()
    assert (pwd, greeting, int(memory)) == ("/app", "hello", 512 * 1024 * 1024)
    assert "data.txt" in files


async def test_build_failure_and_verifier_timeout_are_infra_errors(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    bad = samples.harbor_pytest(tmp_path, "bad-build")
    (bad / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nRUN exit 3\n")
    slow = samples.harbor_pytest(tmp_path, "slow-verifier")
    (slow / "tests" / "test.sh").write_text("sleep 30\necho 1 > /logs/verifier/reward.txt\n")
    toml = (
        (slow / "task.toml")
        .read_text()
        .replace("[verifier]\ntimeout_sec = 60.0", "[verifier]\ntimeout_sec = 2.0")
    )
    (slow / "task.toml").write_text(toml)
    by = load_tasks(tmp_path).by_id()
    built = await check_task(podman, by["samples-bad-build"])
    assert not built.ok and "image build" in built.reason and "failed" in built.reason
    timed = await check_task(podman, by["samples-slow-verifier"])
    assert not timed.ok and "ran past 2s" in timed.reason


async def test_a_real_checkout_loads_and_every_verdict_has_a_reason(
    podman: ContainerBackend,
) -> None:
    """``OPENFORGE_HARBOR_TASKS``: a directory of published Harbor / Terminal-Bench tasks."""
    where = os.environ.get("OPENFORGE_HARBOR_TASKS")
    if not where:
        pytest.skip("OPENFORGE_HARBOR_TASKS is not set: no published task checkout to run")
    loaded = load_tasks(where)
    assert loaded.tasks, loaded.errors
    for task in loaded.tasks[:5]:
        result = await check_task(podman, task, use_cache=False)
        assert result.ok or result.reason, result


async def test_training_leaves_quarantined_tasks_out(
    podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openforge.training.config import TrainConfig
    from openforge.training.session import _checked

    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENFORGE_BASE_IMAGES", "debian:bookworm=" + samples.BASE)
    samples.harbor_pytest(tmp_path / "suite")
    samples.harbor_broken(tmp_path / "suite")
    tasks = load_tasks(tmp_path / "suite").tasks
    kept = await _checked(TrainConfig(sandbox="podman"), tasks)
    assert [t.id for t in kept] == ["samples-count-lines"]
    unchecked = await _checked(TrainConfig(sandbox="podman", check_tasks=False), tasks)
    assert len(unchecked) == 2


def test_cli_check_table_and_images_build(podman_images: dict[str, str], tmp_path: Path) -> None:
    samples.harbor_pytest(tmp_path / "suite")
    samples.harbor_broken(tmp_path / "suite")
    env = {**os.environ, "OPENFORGE_HOME": str(tmp_path / "home"), "COLUMNS": "250",
           "OPENFORGE_BASE_IMAGES": "debian:bookworm=" + samples.BASE}  # fmt: skip
    cli = [str(Path(sys.executable).parent / "openforge")]
    check = subprocess.run([*cli, "tasks", "check", "--backend", "podman", "--tasks",
                            str(tmp_path / "suite")],
                           capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert check.returncode == 1, check.stderr
    rows = {line.split("│")[1].strip(): line for line in check.stdout.splitlines() if "│" in line}
    assert "ok" in rows["samples-count-lines"] and "quarantined" in rows["no-pytest"]
    built = subprocess.run([*cli, "images", "build", "--tasks", str(tmp_path / "suite")],
                           capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    refs = dict(line.split("\t") for line in built.stdout.splitlines())
    assert set(refs) == {"samples-count-lines", "no-pytest"}
    assert all(r.startswith("localhost/openforge-task:") for r in refs.values())
    # A task's compose sidecars are built beside it, a line each (a pod pulls them too).
    samples.harbor_sidecar(tmp_path / "side")
    built = subprocess.run([*cli, "images", "build", "--tasks", str(tmp_path / "side")],
                           capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    refs = dict(line.split("\t") for line in built.stdout.splitlines())
    assert set(refs) == {"sidecar", "sidecar/api"} and refs["sidecar"] != refs["sidecar/api"]


async def test_min_reward_table_stops_the_episode_and_healthchecks_gate_the_agent(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    d = samples.harbor_steps(tmp_path)
    toml = (
        (d / "task.toml").read_text().replace("min_reward = 1.0", "min_reward = { a = 1, b = 1 }")
    )
    (d / "task.toml").write_text(toml + '[environment.healthcheck]\ncommand = "test -f data.txt"\n')
    (d / "steps" / "one" / "tests" / "test.sh").write_text(
        'echo \'{"a": 1, "b": 0}\' > /logs/verifier/reward.json\n'
    )
    (task,) = load_tasks(d).tasks
    spec = sandbox_spec(task, "/workspace")
    box = await podman.create(spec)
    turns: list[str] = []
    try:

        async def record(turn: Turn) -> TurnOutcome:
            turns.append(turn.step.name if turn.step else "")
            return TurnOutcome()

        episode = await run_episode(box, task, spec.workdir, record)
    finally:
        await box.close()
    assert turns == ["one"] and episode.reward == 0.5  # step two never ran: b < 1
    assert episode.details["steps"][0]["details"]["rewards"] == {"a": 1.0, "b": 0.0}
    unhealthy = toml + '[environment.healthcheck]\ncommand = "test -f /nope"\nretries = 1\n'
    unhealthy += "interval_sec = 0.1\n"
    (d / "task.toml").write_text(unhealthy)
    (task,) = load_tasks(d).tasks
    result = await check_task(podman, task)
    assert not result.ok and "healthcheck failed (1 tries)" in result.reason


async def test_step_healthcheck_gates_the_step_and_never_hides_the_agents_failure(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    """The healthcheck of step two checks what step one's agent had to make: the oracle
    passes it (1), a no-op fails it, and that failure scores the step 0 — it followed the
    agent's turn, so it is never the environment's (infra) fault. Step one's own healthcheck
    failing comes before any agent: the environment did not come up."""
    (task,) = load_tasks(samples.harbor_healthcheck(tmp_path)).tasks
    result = await check_task(podman, task)
    assert (result.ok, result.oracle, result.noop, result.reason) == (True, 1.0, 0.0, "")
    spec = sandbox_spec(task, "/workspace")
    box = await podman.create(spec)
    turns: list[str] = []
    try:

        async def idle(turn: Turn) -> TurnOutcome:
            turns.append(turn.step.name if turn.step else "")
            return TurnOutcome()

        episode = await run_episode(box, task, spec.workdir, idle)
    finally:
        await box.close()
    assert turns == ["scaffold"] and episode.reward == 0.0
    _scaffold, implement = episode.details["steps"]
    assert implement["reward"] == 0.0
    assert (
        "healthcheck failed (3 tries): test -x /app/greet.sh" in implement["details"]["not_started"]
    )
    (task,) = load_tasks(samples.harbor_healthcheck(tmp_path / "b", "test -d /nope")).tasks
    result = await check_task(podman, task)
    assert not result.ok and result.oracle is None
    assert "step scaffold: healthcheck failed (2 tries): test -d /nope" in result.reason


async def test_skills_dir_reaches_each_harness_own_skills_directory(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    """The image's ``/skills/<name>/`` is copied where each harness loads skills from (the
    adapters' own paths), and the task checks out; a ``skills_dir`` the image lacks is a
    harness set-up failure (the orchestrator's ``infra_error``), before any agent ran."""
    (task,) = load_tasks(samples.harbor_skills(tmp_path)).tasks
    result = await check_task(podman, task)
    assert (result.ok, result.oracle, result.noop) == (True, 1.0, 0.0), result
    box = await podman.create(sandbox_spec(task, "/workspace"))
    try:
        for harness in (ClaudeCodeHarness(), CodexHarness(), OpenClawHarness()):
            await add_skills(box, "/skills/", harness)
            path = f"{harness.skills_home}/make-greeting/SKILL.md"
            got = await box.get([path])
            assert b"name: make-greeting" in got[path], harness.name
        with pytest.raises(HarnessError, match="skills_dir /nope is not a directory of the image"):
            await add_skills(box, "/nope", ClaudeCodeHarness())
    finally:
        await box.close()


def _rpc(i: int | None, method: str, params: dict[str, object]) -> str:
    msg: dict[str, object] = {"jsonrpc": "2.0", "method": method, "params": params}
    if i is not None:
        msg["id"] = i
    return json.dumps(msg)


async def test_task_mcp_server_reaches_harnesses_through_the_bridge_relay(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    """The task's own streamable-http MCP server (started by its image) is what a harness's
    stdio MCP client sees through the bridge's relay, run on the runtime Python of a task image
    that has its own: the handshake, the tool list, a call answered as an event stream. A
    server that is not there answers every request with an error (a harness never hangs)."""
    (task,) = load_tasks(samples.harbor_mcp(tmp_path)).tasks
    result = await check_task(podman, task)
    assert (result.ok, result.oracle, result.noop) == (True, 1.0, 0.0), result
    assert task.mcp is not None and isinstance(task.sidecars, McpRelay)
    session = [
        _rpc(1, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                               "clientInfo": {"name": "t", "version": "0"}}),
        _rpc(None, "notifications/initialized", {}),
        _rpc(2, "tools/list", {}),
        _rpc(3, "tools/call", {"name": "get_secret", "arguments": {}}),
    ]  # fmt: skip
    box = await podman.create(sandbox_spec(task, "/workspace"))
    try:
        await task.sidecars.prepare(box)
        stdin = ("\n".join(session) + "\n").encode()
        for _ in range(50):  # the image's ENTRYPOINT starts the server beside sandboxd
            if (
                await box.exec(["curl", "-s", "-o", "/dev/null", "http://127.0.0.1:8000/"])
            ).exit_code == 0:
                break
            await asyncio.sleep(0.2)
        res = await box.exec(list(task.mcp.command), stdin=stdin, timeout=60)
        assert res.exit_code == 0, res.stderr
        answers = {m["id"]: m for m in map(json.loads, res.stdout.decode().splitlines())}
        assert set(answers) == {1, 2, 3}
        assert answers[1]["result"]["serverInfo"]["name"] == "m"
        assert [t["name"] for t in answers[2]["result"]["tools"]] == ["get_secret"]
        assert answers[3]["result"]["content"][0]["text"] == "forge-secret-7"
        gone = (*task.mcp.command[:-1], "http://127.0.0.1:9/mcp")
        res = await box.exec(list(gone), stdin=stdin, timeout=60)
        errors = [json.loads(line) for line in res.stdout.decode().splitlines()]
        assert sorted(e["id"] for e in errors) == [1, 2, 3]
        assert all("task MCP server" in e["error"]["message"] for e in errors)
    finally:
        await box.close()


# The cookbook's recipes whose compose sidecars need the internet to build (pip, PyPI's
# fastmcp, ghcr.io's uv, all FROM python:3.12-slim): quarantined offline, never scored.
_ONLINE_RECIPES = ("computer-use-ubuntu", "mcp-tools", "multi-container", "simulated-user")


async def test_the_harbor_cookbook_recipes_check_out_or_say_why_not(
    podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OPENFORGE_HARBOR_COOKBOOK``: the ``harbor_cookbook/recipes`` directory of a
    harbor-cookbook checkout, with ``OPENFORGE_BASE_IMAGES`` mapping ``ubuntu:24.04`` to the uv
    base (deploy/build-uv-base.sh), as the table in docs/tasks.md was made: every recipe that
    runs offline scores 1 with its oracle and 0 with a no-op; those whose sidecars need the
    internet are quarantined naming the image they could not get."""
    where = os.environ.get("OPENFORGE_HARBOR_COOKBOOK")
    if not where:
        pytest.skip("OPENFORGE_HARBOR_COOKBOOK is not set: no harbor-cookbook checkout to run")
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    loaded = load_tasks(where)
    (windows,) = loaded.errors  # Daytona's cloud Windows: its key is not set here
    assert "computer-use-windows" in windows.file and "DAYTONA_API_KEY" in windows.problem
    assert {t.path.name for t in loaded.tasks} == {
        "dns-blacklisting", "multi-reward", "multi-step", "simple-task", "skills", *_ONLINE_RECIPES
    }  # fmt: skip
    backend = create_backend("podman", base_images=base_images_from_env())
    try:
        for task in loaded.tasks:
            result = await check_task(backend, task, use_cache=False)
            if task.path.name in _ONLINE_RECIPES:
                assert not result.ok and result.oracle is None, result
                assert "python:3.12-slim" in result.reason, result
            else:
                assert (result.ok, result.oracle, result.noop) == (True, 1.0, 0.0), result
    finally:
        await backend.close()


async def test_a_compose_sidecar_runs_beside_the_task_on_its_network(
    podman: ContainerBackend, tmp_path: Path
) -> None:
    """A compose service besides ``main`` is built from its own context and runs as a
    container sharing the sandbox's network, reached by its service name: the oracle fetches
    from it (1), a no-op does not (0). A sidecar that never turns healthy quarantines the task
    with its name (the environment's fault, before any agent)."""
    (task,) = load_tasks(samples.harbor_sidecar(tmp_path)).tasks
    result = await check_task(podman, task)
    assert (result.ok, result.oracle, result.noop, result.reason) == (True, 1.0, 0.0, "")
    (sick,) = load_tasks(samples.harbor_sidecar(tmp_path / "b", "test -f /nope", 2)).tasks
    result = await check_task(podman, sick)
    assert not result.ok and "sidecar api is unhealthy (2 tries)" in result.reason, result
    left = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    assert not [n for n in left.stdout.split() if n.endswith("-api")], left.stdout
