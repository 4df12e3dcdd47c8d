"""Harbor tasks (and Terminal-Bench 1, their predecessor) in their own environments.

Harbor (https://harborframework.com/docs/tasks)::

    task.toml  instruction.md  environment/Dockerfile  tests/test.sh  solution/solve.sh
    steps/<name>/{instruction.md, workdir/, tests/, solution/}     (multi-step, [[steps]])

Every known ``task.toml`` field is either honoured or refused with a :class:`TaskError` naming
it; a key this loader does not know is a :class:`TaskWarning` naming it (and the closest known
one), never a refusal: the published files are the truth. Refused: agent/verifier ``user``
other than root, ``allowlist`` networks, a separate verifier environment, GPUs, non-Linux,
more than one ``mcp_servers`` entry or an ``sse`` one. The MCP server is offered to the
harness (``stdio``: its command; ``streamable-http``: the MCP bridge's relay);
``skills_dir`` (a directory of the image) is copied into the harness's own skills directory,
as Harbor does; a step's ``healthcheck`` gates it; ``environment/docker-compose.yaml``
services besides ``main`` are sidecars (``compose.py``). ``artifacts`` are accepted and noted
(not collected).

Terminal-Bench 1: ``task.yaml`` (``instruction``, ``parser_name: pytest``, timeouts),
``Dockerfile`` (or the ``client`` service of ``docker-compose.yaml``), ``run-tests.sh`` and
``tests/`` (copied to ``/tests``, ``$TEST_DIR``), ``solution.sh``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import yaml

from openforge.environments.services import McpRelay
from openforge.suites.harbor.compose import compose_services
from openforge.tasks.model import (
    Healthcheck,
    McpServer,
    Task,
    TaskEnvironment,
    TaskError,
    TaskStep,
    TaskWarning,
    TestsVerifier,
    collect_dir,
    inside,
    read_task_data,
    read_yaml_mapping,
    unknown_keys,
)
from openforge.tasks.native import ID_RE, number, string_list

__all__ = ["load_harbor", "load_terminal_bench", "with_reward_key"]

_TOP = (
    "schema_version", "version", "task", "metadata", "agent", "verifier", "environment",
    "solution", "source", "steps", "artifacts", "multi_step_reward_strategy",
    "multi_step_reward_mode",
)  # fmt: skip
_TASK = ("name", "description", "authors", "keywords", "version")
_AGENT = ("timeout_sec", "user", "network_mode", "allowed_hosts")
_VERIFIER = (
    "timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode",
    "environment",
)  # fmt: skip
_ENVIRONMENT = (
    "build_timeout_sec", "docker_image", "cpus", "memory_mb", "storage_mb", "gpus", "gpu_types",
    "allow_internet", "network_mode", "allowed_hosts", "mcp_servers", "env", "skills_dir",
    "healthcheck", "memory", "storage", "workdir", "os",
)  # fmt: skip
_HEALTH = ("command", "interval_sec", "timeout_sec", "start_period_sec", "start_interval_sec",
           "retries")  # fmt: skip
_MCP = ("name", "transport", "url", "command", "args")
_STEP = ("name", "agent", "verifier", "min_reward", "healthcheck", "artifacts")
_STEP_AGENT = ("timeout_sec", "user")
_STEP_VERIFIER = ("timeout_sec", "env", "user", "environment_mode", "environment")
_TB_KEYS = (
    "instruction", "descriptions", "author_name", "author_email", "difficulty", "category", "tags",
    "parser_name", "max_agent_timeout_sec", "max_test_timeout_sec", "run_tests_in_same_shell",
    "disable_asciinema", "estimated_duration_sec", "expert_time_estimate_min",
    "junior_time_estimate_min",
)  # fmt: skip
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.I | re.M)
_SIZE = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}


def _table(
    file: Path, data: dict[str, Any], key: str, known: tuple[str, ...], warns: list[TaskWarning]
) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TaskError(file, key, "must be a table")
    warns += unknown_keys(file, value, known, f"{key}.")
    return value


def _env(file: Path, value: Any, field_name: str) -> dict[str, str]:
    """A ``{NAME: value}`` table with ``${VAR}`` / ``${VAR:-default}`` taken from this host."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskError(file, field_name, "must be a table of strings")
    out: dict[str, str] = {}
    for name, raw in value.items():
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            raise TaskError(file, f"{field_name}.{name}", f"must be a string, got {raw!r}")

        def sub(m: re.Match[str], name: str = name) -> str:
            got = os.environ.get(m.group(1), m.group(2))
            if got is None:
                raise TaskError(file, f"{field_name}.{name}", f"${{{m.group(1)}}} is not set")
            return got

        out[str(name)] = _TEMPLATE.sub(sub, str(raw))
    return out


def _root_user(file: Path, table: dict[str, Any], field_name: str) -> None:
    user = table.get("user")
    if user not in (None, "root", 0):
        raise TaskError(file, field_name, f"only root is supported, got {user!r}")


def _size_mb(file: Path, env: dict[str, Any], key: str, legacy: str) -> int | None:
    value = number(file, env, key, None, "environment.")
    if value is not None or legacy not in env:
        return None if value is None else int(value)
    raw = str(env[legacy]).strip()
    unit = _SIZE.get(raw[-1:].upper())
    try:
        return int(float(raw[:-1]) * unit) if unit is not None else int(raw)
    except ValueError:
        raise TaskError(
            file, f"environment.{legacy}", f"must read like 4G or 512M, got {raw!r}"
        ) from None


def _refuse_unsupported(
    file: Path, env: dict[str, Any], verifier: dict[str, Any], agent: dict[str, Any]
) -> None:
    if env.get("gpus") not in (None, 0) or env.get("gpu_types"):
        raise TaskError(file, "environment.gpus", "GPU environments are not supported")
    if env.get("os", "linux") != "linux":
        raise TaskError(file, "environment.os", f"only linux is supported, got {env['os']!r}")
    for where, table in (("environment", env), ("verifier", verifier), ("agent", agent)):
        if table.get("network_mode") == "allowlist" or table.get("allowed_hosts"):
            raise TaskError(file, f"{where}.allowed_hosts", "allowlist networks are not supported")
    if verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        raise TaskError(
            file, "verifier.environment_mode", "a separate verifier environment is not supported"
        )


def _mcp_server(
    file: Path, value: Any, warns: list[TaskWarning]
) -> tuple[McpServer, McpRelay | None] | None:
    """The task's MCP server (``[[environment.mcp_servers]]``) as harnesses are given it: a
    ``stdio`` one as its command, a ``streamable-http`` one through the bridge's relay."""
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TaskError(file, "environment.mcp_servers", "must be an array of tables")
    if len(value) > 1:
        raise TaskError(
            file, "environment.mcp_servers", "more than one task MCP server is not supported yet"
        )
    (entry,) = value
    where = "environment.mcp_servers[0]"
    warns += unknown_keys(file, entry, _MCP, f"{where}.")
    name = entry.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise TaskError(file, f"{where}.name", f"must be a name of [A-Za-z0-9_-], got {name!r}")
    transport = entry.get("transport", "sse")
    if transport == "stdio":
        command, args = entry.get("command"), entry.get("args", [])
        if not isinstance(command, str) or not command:
            raise TaskError(file, f"{where}.command", "a stdio server needs a command")
        argv = (command, *string_list(file, args, f"{where}.args"))
        return McpServer(name=name, command=argv, call=(), tools=()), None
    if transport == "sse":
        raise TaskError(
            file, f"{where}.transport", "sse is not supported yet (streamable-http and stdio are)"
        )
    if transport != "streamable-http":
        raise TaskError(file, f"{where}.transport", f"must be stdio, sse or streamable-http, "
                        f"got {transport!r}")  # fmt: skip
    url = entry.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise TaskError(file, f"{where}.url", f"must be an http(s) URL, got {url!r}")
    relay = McpRelay(url)
    return McpServer(name=name, command=relay.command(), call=(), tools=()), relay


def _healthcheck(
    file: Path, value: Any, where: str, warns: list[TaskWarning]
) -> Healthcheck | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("command"), str):
        raise TaskError(file, where, "must be a table with a command")
    warns += unknown_keys(file, value, _HEALTH, f"{where}.")
    retries = number(file, value, "retries", 3, f"{where}.") or 3
    return Healthcheck(
        command=value["command"],
        interval_s=number(file, value, "interval_sec", 5.0, f"{where}.") or 5.0,
        timeout_s=number(file, value, "timeout_sec", 30.0, f"{where}.") or 30.0,
        # 0 (Docker's default) is allowed here: no start period.
        start_period_s=0.0
        if value.get("start_period_sec") in (None, 0)
        else number(file, value, "start_period_sec", None, f"{where}.") or 0.0,
        start_interval_s=number(file, value, "start_interval_sec", 5.0, f"{where}.") or 5.0,
        retries=int(retries),
    )


def dockerfile_workdir(dockerfile: Path) -> str | None:
    """The last literal ``WORKDIR`` of a Dockerfile (where its tests expect to run), or None."""
    if not dockerfile.is_file():
        return None
    found = [w for w in _WORKDIR.findall(dockerfile.read_text(errors="replace")) if "$" not in w]
    return found[-1] if found else None


def _environment(
    file: Path,
    root: Path,
    env: dict[str, Any],
    context: Path,
    dockerfile: Path,
    warns: list[TaskWarning],
) -> TaskEnvironment:
    image = env.get("docker_image")
    if image is not None and not isinstance(image, str):
        raise TaskError(file, "environment.docker_image", f"must be a string, got {image!r}")
    workdir = env.get("workdir") or dockerfile_workdir(dockerfile)
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")):
        raise TaskError(file, "environment.workdir", f"must be an absolute path, got {workdir!r}")
    has_build = dockerfile.is_file()
    compose = [n for n in ("docker-compose.yaml", "docker-compose.yml") if (context / n).is_file()]
    if compose and not has_build:
        raise TaskError(
            root,
            f"environment/{compose[0]}",
            "compose environments are not supported (a Dockerfile is)",
        )
    timeout = number(file, env, "build_timeout_sec", 600.0, "environment.") or 600.0
    services = compose_services(context / compose[0], timeout, warns) if compose else ()
    if not has_build and image is None:
        raise TaskError(root, "environment/Dockerfile", "missing (or set environment.docker_image)")
    skills = env.get("skills_dir")
    if skills is not None and (not isinstance(skills, str) or not skills.startswith("/")):
        raise TaskError(file, "environment.skills_dir", f"must be an absolute path, got {skills!r}")
    return TaskEnvironment(
        context=context if has_build else None,
        dockerfile=dockerfile if has_build else None,
        image=None if has_build else image,
        build_timeout_s=timeout,
        workdir=workdir,
        env=_env(file, env.get("env"), "environment.env"),
        healthcheck=_healthcheck(file, env.get("healthcheck"), "environment.healthcheck", warns),
        skills_dir=skills,
        services=services,
    )


def _tests(root: Path, sub: str) -> dict[str, Path]:
    return collect_dir(root, sub, f"{sub}/")


def _min_reward(file: Path, value: Any, where: str) -> float | dict[str, float] | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        return {str(k): float(v) for k, v in value.items()}
    raise TaskError(file, where, f"must be a number or a table of numbers, got {value!r}")


def _steps(
    file: Path,
    root: Path,
    data: dict[str, Any],
    agent_timeout: float,
    verifier: TestsVerifier,
    warns: list[TaskWarning],
) -> tuple[TaskStep, ...]:
    raw = data.get("steps")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise TaskError(file, "steps", "must be a non-empty array of tables ([[steps]])")
    shared = _tests(root, "tests")
    out: list[TaskStep] = []
    for i, entry in enumerate(raw):
        where = f"steps[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise TaskError(file, where, "must be a table with a name")
        warns += unknown_keys(file, entry, _STEP, f"{where}.")
        name = entry["name"]
        step_dir = inside(root, f"steps/{name}", file, f"{where}.name")
        md = step_dir / "instruction.md"
        if not md.is_file():
            raise TaskError(root, f"steps/{name}/instruction.md", "missing")
        agent = _table(file, entry, "agent", _STEP_AGENT, warns)
        ver = _table(file, entry, "verifier", _STEP_VERIFIER, warns)
        _root_user(file, agent, f"{where}.agent.user")
        _root_user(file, ver, f"{where}.verifier.user")
        if ver.get("environment_mode") == "separate" or ver.get("environment"):
            raise TaskError(file, f"{where}.verifier.environment_mode", "not supported")
        tests = {**shared, **_tests(step_dir, "tests")}
        if "test.sh" not in tests:
            raise TaskError(root, f"steps/{name}/tests/test.sh", "missing (and no tests/test.sh)")
        step_verifier = TestsVerifier(
            tests=tests,
            env={**verifier.env, **_env(file, ver.get("env"), f"{where}.verifier.env")},
            timeout_s=number(file, ver, "timeout_sec", verifier.timeout_s, f"{where}.verifier.")
            or verifier.timeout_s,
        )
        out.append(
            TaskStep(
                name=name,
                instruction=md.read_text(encoding="utf-8").strip(),
                timeout_s=number(file, agent, "timeout_sec", agent_timeout, f"{where}.agent.")
                or agent_timeout,
                verifier=step_verifier,
                files=collect_dir(step_dir, "workdir", f"steps/{name}/workdir/"),
                solution=collect_dir(step_dir, "solution", f"steps/{name}/solution/"),
                min_reward=_min_reward(file, entry.get("min_reward"), f"{where}.min_reward"),
                healthcheck=_healthcheck(
                    file, entry.get("healthcheck"), f"{where}.healthcheck", warns
                ),
            )
        )
    return tuple(out)


def _require_single_step_files(root: Path, md: Path) -> None:
    """A single-step task states its instruction and its tests at the top level."""
    if not md.is_file():
        raise TaskError(root, "instruction.md", "missing: a Harbor task needs instruction.md")
    if not (root / "tests" / "test.sh").is_file():
        raise TaskError(root, "tests/test.sh", "missing: a Harbor task needs tests/test.sh")


def _task_id(file: Path, root: Path, info: dict[str, Any]) -> str:
    """``[task].name`` (slashes made dashes), else the directory's name."""
    task_id = str(info.get("name") or root.name).replace("/", "-")
    if not ID_RE.match(task_id):
        raise TaskError(file, "task.name", f"must be [A-Za-z0-9._/-], got {task_id!r}")
    return task_id


def _free_form_tags(meta: dict[str, Any], info: dict[str, Any]) -> object:
    """[metadata] is free-form in Harbor: tags are read when they are a list of strings."""
    tags = meta.get("tags", info.get("keywords"))
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return None
    return tags


def _artifact_notes(data: dict[str, Any]) -> tuple[str, ...]:
    """Notes for the artifacts a task asks for, which are accepted but not collected."""
    return tuple(
        f"{key}: accepted but not collected" for key in ("artifacts",) if data.get(key)
    ) + tuple(f"steps[{i}].artifacts: not collected" for i, s in enumerate(data.get("steps") or [])
              if isinstance(s, dict) and s.get("artifacts"))  # fmt: skip


def _wants_internet(env: dict[str, Any], agent: dict[str, Any]) -> bool:
    """Harbor's default is a public network (allow_internet = true); only an explicit
    allow_internet = false or network_mode = "no-network" says the task needs none."""
    modes = (env.get("network_mode"), agent.get("network_mode"))
    return "public" in modes or (
        env.get("allow_internet", True) is not False and "no-network" not in modes
    )


def load_harbor(root: Path) -> Task:
    """Load a Harbor task directory (single- or multi-step)."""
    file = root / "task.toml"
    data = read_task_data(file)  # a file that is not TOML (or not UTF-8) is a TaskError
    warns = unknown_keys(file, data, _TOP)
    info = _table(file, data, "task", _TASK, warns)
    agent = _table(file, data, "agent", _AGENT, warns)
    ver = _table(file, data, "verifier", _VERIFIER, warns)
    env = _table(file, data, "environment", _ENVIRONMENT, warns)
    solution = _table(file, data, "solution", ("env",), warns)
    meta = data.get("metadata", {})
    if not isinstance(meta, dict):
        raise TaskError(file, "metadata", "must be a table")
    _root_user(file, agent, "agent.user")
    _root_user(file, ver, "verifier.user")
    _refuse_unsupported(file, env, ver, agent)
    multi = "steps" in data
    md = root / "instruction.md"
    if not multi:
        _require_single_step_files(root, md)
    task_id = _task_id(file, root, info)
    strategy = data.get("multi_step_reward_strategy", "mean")
    if strategy not in ("mean", "final"):
        raise TaskError(file, "multi_step_reward_strategy", f"must be mean or final: {strategy!r}")
    agent_timeout = number(file, agent, "timeout_sec", 600.0, "agent.") or 600.0
    verifier = TestsVerifier(
        tests=_tests(root, "tests"),
        env=_env(file, ver.get("env"), "verifier.env"),
        timeout_s=number(file, ver, "timeout_sec", 600.0, "verifier.") or 600.0,
    )
    steps = _steps(file, root, data, agent_timeout, verifier, warns)
    tags = _free_form_tags(meta, info)
    notes = _artifact_notes(data)
    wants_internet = _wants_internet(env, agent)
    cpus = number(file, env, "cpus", None, "environment.")
    mcp = _mcp_server(file, env.get("mcp_servers"), warns)
    return Task(
        id=task_id,
        instruction="\n\n".join(s.instruction for s in steps)
        if multi
        else md.read_text(encoding="utf-8").strip(),
        path=root,
        format="harbor",
        timeout_s=sum(s.timeout_s for s in steps) if steps else agent_timeout,
        verify_timeout_s=verifier.timeout_s,
        cpu=cpus,
        memory_mb=_size_mb(file, env, "memory_mb", "memory"),
        disk_mb=_size_mb(file, env, "storage_mb", "storage"),
        tags=string_list(file, tags, "metadata.tags"),
        solution=collect_dir(root, "solution", "solution/"),
        environment=_environment(
            file, root, env, root / "environment", root / "environment" / "Dockerfile", warns
        ),
        tests=None if multi else verifier,
        steps=steps,
        step_reward=strategy,
        solution_env=_env(file, solution.get("env"), "solution.env"),
        wants_internet=wants_internet,
        notes=notes,
        warnings=tuple(warns),
        mcp=None if mcp is None else mcp[0],
        sidecars=None if mcp is None else mcp[1],
    )


def _compose_build(root: Path, file: Path) -> tuple[Path, Path]:
    """The build context and Dockerfile of a Terminal-Bench task (``client`` service)."""
    compose = root / "docker-compose.yaml"
    if not compose.is_file():
        return root, root / "Dockerfile"
    try:
        spec = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise TaskError(compose, "(yaml)", f"not valid YAML: {exc}") from exc
    services = spec.get("services") if isinstance(spec, dict) else None
    if isinstance(services, dict) and len(services) > 1:
        raise TaskError(compose, "services", "several services are not supported (only client)")
    client = (services or {}).get("client", {}) if isinstance(services, dict) else {}
    build = client.get("build", ".") if isinstance(client, dict) else "."
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict):
        raise TaskError(compose, "services.client.build", "must be a path or a table")
    context = inside(root, str(build.get("context", ".")), compose, "services.client.build")
    dockerfile = inside(context, str(build.get("dockerfile", "Dockerfile")), compose,
                        "services.client.build.dockerfile")  # fmt: skip
    return context, dockerfile


def load_terminal_bench(root: Path) -> Task:
    """Load a Terminal-Bench 1 task directory (``task.yaml`` + Dockerfile + run-tests.sh)."""
    file = root / "task.yaml"
    data = read_yaml_mapping(file)
    warns = unknown_keys(file, data, _TB_KEYS)
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(file, "instruction", "missing or empty")
    parser = data.get("parser_name", "pytest")
    if parser != "pytest":
        raise TaskError(file, "parser_name", f"only the pytest parser is supported, got {parser!r}")
    if not ID_RE.match(root.name):
        raise TaskError(root, "(directory name)", f"must be [A-Za-z0-9._/-], got {root.name!r}")
    tests = {k: v for k, v in collect_dir(root, "tests", "tests/").items()}
    if (root / "run-tests.sh").is_file():
        tests["run-tests.sh"] = inside(root, "run-tests.sh", file, "run-tests.sh")
    if "run-tests.sh" not in tests:
        raise TaskError(root, "run-tests.sh", "missing: a Terminal-Bench task needs run-tests.sh")
    context, dockerfile = _compose_build(root, file)
    if not dockerfile.is_file():
        raise TaskError(root, "Dockerfile", "missing: a Terminal-Bench task needs a Dockerfile")
    # The build context is usually the task directory itself, tests and solution included:
    # they stay out of the image, which is where the agent works.
    hidden = tuple(
        (root / name).relative_to(context).as_posix()
        for name in ("tests", "run-tests.sh", "solution.sh", "solution.yaml", "solution")
        if (root / name).exists() and context in (root / name).parents
    )
    timeout = number(file, data, "max_test_timeout_sec", 180.0) or 180.0
    solution = collect_dir(root, "solution", "solution/")
    if (root / "solution.sh").is_file():
        solution = {"solve.sh": inside(root, "solution.sh", file, "solution.sh")}
    notes: tuple[str, ...] = ()
    if not solution and (root / "solution.yaml").is_file():
        notes = ("solution.yaml: terminal keystroke solutions are not run (only solution.sh)",)
    return Task(
        id=root.name,
        instruction=instruction.strip(),
        path=root,
        format="terminal-bench",
        timeout_s=number(file, data, "max_agent_timeout_sec", 360.0) or 360.0,
        verify_timeout_s=timeout,
        tags=string_list(file, data.get("tags"), "tags"),
        solution=solution,
        environment=TaskEnvironment(
            context=context,
            dockerfile=dockerfile,
            workdir=dockerfile_workdir(dockerfile),
            env={"TEST_DIR": "/tests"},
            hidden=hidden,
        ),
        tests=TestsVerifier(
            tests=tests,
            entry="run-tests.sh",
            env={"TEST_DIR": "/tests"},
            timeout_s=timeout,
            parser="pytest",
        ),
        notes=notes,
        warnings=tuple(warns),
        wants_internet=True,  # Terminal-Bench containers have a network (compose's default)
    )


def with_reward_key(task: Task, key: str) -> Task:
    """``task`` with its reward read from reward.json's ``key`` (every step's too).

    Several keys are all kept in the details either way; without this the reward is
    ``reward`` if present, else their mean. Tasks without Harbor's contract are unchanged.
    """
    tests = task.tests and dataclasses.replace(task.tests, reward_key=key)
    steps = tuple(
        dataclasses.replace(s, verifier=dataclasses.replace(s.verifier, reward_key=key))
        for s in task.steps
    )
    return dataclasses.replace(task, tests=tests, steps=steps)
