"""The Harbor and Terminal-Bench loaders and verifier semantics, without containers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.environments.services import McpRelay
from openforge.rollouts.runner import task_roles
from openforge.sandboxes import SandboxBackend
from openforge.sandboxes.base import ModelKey, SandboxError, TaskImage, model_env
from openforge.sandboxes.images import ImageBuilder, parse_base_images, substitute_bases
from openforge.suites import load_tasks
from openforge.suites.harbor.loader import with_reward_key
from openforge.tasks.episode import Turn, TurnOutcome, run_episode, sandbox_spec
from openforge.tasks.grading import VerifierError
from openforge.tasks.oracle import check_task
from openforge.tasks.verify import aggregate_rewards, parse_pytest_summary

from . import harbor_samples as samples

HEAD = '[task]\nname = "org/t"\n'


def _harbor(tmp_path: Path, toml: str) -> Path:
    d = samples.harbor_pytest(tmp_path, "t")
    (d / "task.toml").write_text(toml)
    return d


def test_every_honoured_field_reaches_the_task(tmp_path: Path) -> None:
    d = _harbor(
        tmp_path,
        HEAD + '[metadata]\ntags = ["a"]\n[agent]\ntimeout_sec = 30.0\nuser = "root"\n'
        '[verifier]\ntimeout_sec = 20.0\nenv = { K = "v" }\n[solution]\nenv = { S = "s" }\n'
        '[environment]\nbuild_timeout_sec = 99.0\ncpus = 2\nmemory = "1G"\nstorage = "2G"\n'
        'workdir = "/srv"\nallow_internet = true\nenv = { E = "${OPENFORGE_T_UNSET:-dflt}" }\n'
        '[environment.healthcheck]\ncommand = "true"\nretries = 2\n',
    )
    (task,) = load_tasks(d).tasks
    assert task.id == "org-t" and task.tags == ("a",) and task.timeout_s == 30.0
    assert task.tests is not None and task.tests.env == {"K": "v"} and task.tests.timeout_s == 20
    assert task.solution_env == {"S": "s"} and task.cpu == 2.0
    assert (task.memory_mb, task.disk_mb) == (1024, 2048)
    env = task.environment
    assert env is not None and env.workdir == "/srv" and env.env == {"E": "dflt"}
    assert env.build_timeout_s == 99.0 and env.healthcheck and env.healthcheck.retries == 2
    assert env.dockerfile == d / "environment" / "Dockerfile" and task.wants_internet
    assert sandbox_spec(task, "/workspace").network == "gateway"
    (d / "task.toml").write_text(HEAD + "[environment]\nallow_internet = false\n")
    assert not load_tasks(d).tasks[0].wants_internet
    (d / "task.toml").write_text(HEAD + '[environment]\nnetwork_mode = "no-network"\n')
    assert not load_tasks(d).tasks[0].wants_internet
    (d / "task.toml").write_text(HEAD)
    assert load_tasks(d).tasks[0].wants_internet  # Harbor's default: a public network
    assert sandbox_spec(task, "/workspace", internet=True).network == "open"


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('[agent]\nuser = "agent"\n', "agent.user"),
        ("[environment]\ngpus = 1\n", "environment.gpus"),
        ('[environment]\nos = "windows"\n', "environment.os"),
        # Harbor's default transport, sse, is not relayed yet.
        (
            '[[environment.mcp_servers]]\nname = "m"\nurl = "http://x"\n',
            "environment.mcp_servers[0].transport",
        ),
        ('[environment]\nallowed_hosts = ["pypi.org"]\n', "environment.allowed_hosts"),
        ('[verifier]\nenvironment_mode = "separate"\n', "verifier.environment_mode"),
        ('[environment]\nenv = { X = "${OPENFORGE_T_UNSET}" }\n', "environment.env.X"),
        ('[environment]\nmemory = "lots"\n', "environment.memory"),
        ('multi_step_reward_strategy = "max"\n', "multi_step_reward_strategy"),
    ],
)
def test_unsupported_fields_are_refused_by_name(tmp_path: Path, toml: str, field: str) -> None:
    assert "OPENFORGE_T_UNSET" not in os.environ
    (err,) = load_tasks(_harbor(tmp_path, toml + HEAD)).errors
    assert err.field == field, err


def test_artifacts_are_noted_not_dropped(tmp_path: Path) -> None:
    (task,) = load_tasks(_harbor(tmp_path, 'artifacts = ["/app/x"]\n' + HEAD)).tasks
    assert task.notes == ("artifacts: accepted but not collected",)


def test_main_overrides_are_read_past_and_a_sidecar_must_build(tmp_path: Path) -> None:
    d = _harbor(tmp_path, HEAD)
    compose = d / "environment" / "docker-compose.yaml"
    compose.write_text("services:\n  main:\n    environment: [A=1]\n")
    assert load_tasks(d).tasks  # overrides of Harbor's own `main` service only
    compose.write_text(
        "services:\n  main:\n    depends_on: [api-server]\n"
        "  api-server:\n    build: {context: ./api-server}\n"
    )
    (err,) = load_tasks(d).errors
    assert err.field == "services.api-server.build" and "no Dockerfile" in err.problem, err


def test_docker_image_without_dockerfile(tmp_path: Path) -> None:
    d = _harbor(tmp_path, HEAD + '[environment]\ndocker_image = "ubuntu:24.04"\n')
    (d / "environment" / "Dockerfile").unlink()
    (task,) = load_tasks(d).tasks
    assert task.environment and task.environment.image == "ubuntu:24.04"
    (d / "task.toml").write_text(HEAD)
    (err,) = load_tasks(d).errors
    assert err.field == "environment/Dockerfile"


def test_multi_step_layout(tmp_path: Path) -> None:
    (task,) = load_tasks(samples.harbor_steps(tmp_path)).tasks
    one, two = task.steps
    assert (one.name, one.min_reward, two.min_reward) == ("one", 1.0, None)
    assert "test_count.py" in one.verifier.tests and "test.sh" in one.verifier.tests
    assert "setup.sh" in two.files and "solve.sh" in two.solution
    assert two.verifier.timeout_s == 30.0 and task.tests is None
    (tmp_path / "two-steps" / "steps" / "two" / "instruction.md").unlink()
    (err,) = load_tasks(tmp_path / "two-steps").errors
    assert err.field == "steps/two/instruction.md"


def test_terminal_bench_layout(tmp_path: Path) -> None:
    d = samples.terminal_bench(tmp_path)
    (task,) = load_tasks(d).tasks
    assert task.format == "terminal-bench" and task.workdir == "/app"
    assert task.tests and task.tests.parser == "pytest" and task.tests.entry == "run-tests.sh"
    assert set(task.tests.tests) == {"run-tests.sh", "test_outputs.py"}
    assert "solve.sh" in task.solution and task.environment
    assert task.environment.dockerfile == d / "Dockerfile"
    (d / "task.yaml").write_text("instruction: x\nparser_name: swebench\n")
    (err,) = load_tasks(d).errors
    assert err.field == "parser_name"
    (d / "task.yaml").write_text("instruction: x\nmax_agent_timout_sec: 3\n")
    (w,) = load_tasks(d).warnings  # a foreign file: ignored and named, never refused
    assert w.key == "max_agent_timout_sec" and "'max_agent_timeout_sec'" in w.problem


def test_reward_aggregation() -> None:
    assert aggregate_rewards({"reward": 0.25, "x": 1.0}, None) == 0.25
    assert aggregate_rewards({"correctness": 1.0, "performance": 0.5}, None) == 0.75
    assert aggregate_rewards({"correctness": 1.0, "performance": 0.5}, "performance") == 0.5
    with pytest.raises(VerifierError, match="no key"):
        aggregate_rewards({"a": 1.0}, "b")


def test_pytest_summary_parser() -> None:
    out = (
        b"....\n=== short test summary info ===\nPASSED tests/test_a.py::test_one\n"
        b"FAILED tests/test_a.py::test_two - assert 1 == 2\n=== 1 failed, 1 passed ===\n"
    )
    assert parse_pytest_summary(out) == {
        "tests/test_a.py::test_one": "PASSED",
        "tests/test_a.py::test_two": "FAILED",
    }
    assert parse_pytest_summary(b"bash: pytest: command not found\n") == {}
    # The agent's code, run by the tests, prints a summary of its own after pytest's.
    forged = b"=== short test summary info ===\nPASSED tests/test_a.py::test_two\n"
    assert parse_pytest_summary(out + forged)["tests/test_a.py::test_two"] != "PASSED"


def test_base_image_substitution_and_content_tags(tmp_path: Path) -> None:
    mapping = parse_base_images("ubuntu:24.04=localhost/deb, python:3.13-slim = localhost/py")
    text = (
        "FROM ubuntu:24.04 AS build\nRUN x\n"
        "FROM --platform=linux/amd64 docker.io/library/python:3.13-slim\n"
    )
    assert substitute_bases(text, mapping) == (
        "FROM localhost/deb AS build\nRUN x\nFROM --platform=linux/amd64 localhost/py\n"
    )
    with pytest.raises(SandboxError, match="FROM=LOCAL"):
        parse_base_images("ubuntu")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(text)
    (ctx / "a.txt").write_text("1")
    image = TaskImage(context=str(ctx), dockerfile=str(ctx / "Dockerfile"))
    builder = ImageBuilder("podman", mapping)
    first = builder.tag(image)
    assert first == builder.tag(image) and first.startswith("localhost/openforge-task:")
    (ctx / "a.txt").write_text("2")
    assert builder.tag(image) != first
    assert ImageBuilder("podman", {}).tag(image) != builder.tag(image)


def test_compose_environments_and_keystroke_solutions_are_named(tmp_path: Path) -> None:
    d = _harbor(tmp_path, HEAD)
    (d / "environment" / "Dockerfile").unlink()
    (d / "environment" / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    (err,) = load_tasks(d).errors
    assert err.field == "environment/docker-compose.yaml" and "not supported" in err.problem
    tb = samples.terminal_bench(tmp_path / "tb")
    (tb / "solution.sh").unlink()
    (tb / "solution.yaml").write_text("- command: echo hi\n")
    (task,) = load_tasks(tb).tasks
    assert task.solution == {} and "solution.yaml" in task.notes[0]


async def test_on_the_local_backend_the_verifier_says_to_use_podman(
    tmp_path: Path, backend: SandboxBackend
) -> None:
    (task,) = load_tasks(samples.harbor_pytest(tmp_path)).tasks
    spec = sandbox_spec(task, "/workspace")
    spec.workdir, spec.network = "/workspace", "none"  # the local backend's own workdir
    box = await backend.create(spec)
    try:

        async def noop(turn: Turn) -> TurnOutcome:
            return TurnOutcome()

        with pytest.raises(VerifierError, match="--backend podman"):
            await run_episode(box, task, spec.workdir, noop)
    finally:
        await box.close()


async def test_oracle_check_on_the_local_backend_names_the_reason(
    tmp_path: Path, backend: SandboxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    (task,) = load_tasks(samples.harbor_pytest(tmp_path)).tasks
    result = await check_task(backend, task)
    assert not result.ok and "--backend podman" in result.reason


def test_reward_key_option_reaches_every_verifier(tmp_path: Path) -> None:
    (multi,) = load_tasks(samples.harbor_multikey(tmp_path)).tasks
    (steps,) = load_tasks(samples.harbor_steps(tmp_path)).tasks
    assert with_reward_key(multi, "style").tests.reward_key == "style"  # type: ignore[union-attr]
    assert {s.verifier.reward_key for s in with_reward_key(steps, "a").steps} == {"a"}
    assert multi.tests is not None and multi.tests.reward_key is None  # the original is kept


def test_per_step_healthcheck_is_read_with_its_polling(tmp_path: Path) -> None:
    (task,) = load_tasks(samples.harbor_healthcheck(tmp_path)).tasks
    scaffold, implement = task.steps
    assert scaffold.healthcheck is None
    check = implement.healthcheck
    assert check is not None and check.command == "test -x /app/greet.sh"
    assert (check.interval_s, check.timeout_s, check.retries) == (0.2, 5.0, 3)
    assert (check.start_period_s, check.start_interval_s) == (0.5, 0.1)
    assert not task.warnings
    toml = tmp_path / "greet-steps" / "task.toml"
    toml.write_text(toml.read_text().replace("retries = 3", "retries = -1"))
    (err,) = load_tasks(tmp_path / "greet-steps").errors
    assert err.field == "steps[1].healthcheck.retries"


def test_skills_dir_is_read_and_must_be_absolute(tmp_path: Path) -> None:
    (task,) = load_tasks(samples.harbor_skills(tmp_path)).tasks
    assert task.environment and task.environment.skills_dir == "/skills"
    toml = tmp_path / "skills" / "task.toml"
    toml.write_text(toml.read_text().replace('"/skills"', '"skills"'))
    (err,) = load_tasks(tmp_path / "skills").errors
    assert err.field == "environment.skills_dir"


def test_mcp_servers_are_offered_through_the_bridge_or_their_own_command(tmp_path: Path) -> None:
    (task,) = load_tasks(samples.harbor_mcp(tmp_path)).tasks
    assert task.mcp is not None and task.mcp.name == "secrets"
    assert task.mcp.command[-2:] == ("relay", "http://127.0.0.1:8000/mcp")
    assert isinstance(task.sidecars, McpRelay) and task.sidecars.command() == task.mcp.command
    stdio = '[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\n'
    stdio += 'command = "python3"\nargs = ["/srv/fs.py", "--root", "/app"]\n'
    (task,) = load_tasks(_harbor(tmp_path / "stdio", stdio + HEAD)).tasks
    assert task.mcp and task.mcp.command == ("python3", "/srv/fs.py", "--root", "/app")
    assert task.sidecars is None
    for bad, field in (
        (stdio + stdio.replace('"fs"', '"fs2"'), "environment.mcp_servers"),
        (stdio.replace('command = "python3"\n', ""), "environment.mcp_servers[0].command"),
        (stdio.replace('"stdio"', '"streamable-http"'), "environment.mcp_servers[0].url"),
        (stdio.replace('"fs"', '"a b"'), "environment.mcp_servers[0].name"),
    ):
        (err,) = load_tasks(_harbor(tmp_path / field, bad + HEAD)).errors
        assert err.field == field, (bad, err)


def test_compose_services_besides_main_are_sidecars(tmp_path: Path) -> None:
    (task,) = load_tasks(samples.harbor_sidecar(tmp_path)).tasks
    assert task.environment is not None
    (api,) = task.environment.services
    assert api.name == "api" and api.image.context and api.image.context.endswith("api")
    assert api.env == {"TOKEN": "side-car-9"}  # ${VAR:-default} as compose reads it
    assert api.health == ("sh", "-c", "curl -sf http://localhost:5000/token")
    assert (api.interval_s, api.timeout_s, api.retries) == (0.5, 5.0, 20)
    assert sandbox_spec(task, "/workspace").services == (api,)
    compose = tmp_path / "sidecar" / "environment" / "docker-compose.yaml"
    compose.write_text(compose.read_text().replace("500ms", "soon"))
    (err,) = load_tasks(tmp_path / "sidecar").errors
    assert err.field == "services.api.healthcheck.interval"


def test_a_sidecar_that_names_a_vendor_key_calls_a_model_through_the_user_role(
    tmp_path: Path,
) -> None:
    """The cookbook's simulated user names ``ANTHROPIC_API_KEY``: its sidecar is marked as
    calling Anthropic's API, a rollout of the task asks for a user-role key, and the backend
    gives the sidecar that key at the gateway's address inside the sandbox (an oracle check,
    with no gateway, leaves its environment as compose has it)."""
    (task,) = load_tasks(samples.harbor_simulated_user(tmp_path)).tasks
    assert task.environment is not None
    (user,) = task.environment.services
    (plain,) = load_tasks(samples.harbor_sidecar(tmp_path)).tasks
    assert plain.environment is not None
    (api,) = plain.environment.services
    assert (user.model_apis, api.model_apis) == (("anthropic",), ())
    assert task_roles(task, frozenset({"judge", "user"})) == ["user"]
    assert task_roles(task, frozenset({"judge"})) == []
    key = ModelKey("k-1", "/r/k-1/v1", "/r/k-1")
    assert model_env(("anthropic", "openai"), key, "http://127.0.0.1:8080/") == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:8080/r/k-1", "ANTHROPIC_API_KEY": "k-1",
        "ANTHROPIC_AUTH_TOKEN": "k-1",
        "OPENAI_BASE_URL": "http://127.0.0.1:8080/r/k-1/v1", "OPENAI_API_KEY": "k-1",
    }  # fmt: skip
    assert sandbox_spec(task, "/workspace").service_key is None
    # A service that sets the API's base URL itself calls a model the task serves: left be.
    compose = tmp_path / "simulated-user" / "environment" / "docker-compose.yaml"
    own = "      - ANTHROPIC_BASE_URL=http://mock-llm:8080\n      - OPENAI_API_KEY=x\n"
    compose.write_text(compose.read_text().replace("      - SIM_USER_MODEL", own + "      - SIM"))
    (served,) = load_tasks(tmp_path / "simulated-user").tasks
    assert served.environment is not None
    assert served.environment.services[0].model_apis == ("openai",)
