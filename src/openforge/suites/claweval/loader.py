"""ClawEval, from the user's checkout of ``claw-eval/claw-eval``, graded by its own grader classes.

Layout: ``tasks/<task_id>/task.yaml`` + ``tasks/<task_id>/grader.py`` (an
``AbstractGrader`` subclass), ``mock_services/<name>/server.py``, and the ``claw_eval``
package under ``src/``. ``task.yaml`` is ``claw_eval.models.task.TaskDefinition``:
``task_id``, ``task_name``, ``category``, ``prompt: {text, language, attachments}``,
``tools`` (``name``, ``description``, ``input_schema``), ``tool_endpoints`` (``tool_name``,
``url``, ``method``), ``services`` (``name``, ``command``, ``port``, ``health_check``,
``reset_endpoint``, ``env``), ``environment`` (``timeout_seconds``, ``max_turns``,
``fixtures``), ``sandbox_files`` (put in the workspace before the agent starts),
``sandbox_grader_files`` (put there only after it stops: the agent never sees them),
``local_grader_files`` (read on the host by the grader), ``env_snapshot_files`` /
``env_snapshot_commands``, ``judge_rubric``, ``user_agent`` (the ``multi_turn`` split).

Splits follow the README: ``multi_turn`` for tasks whose ``user_agent.enabled`` is true,
else the ``general`` / ``multimodal`` tag. A ``multi_turn`` task's simulated user is
ClawEval's own ``UserAgent`` behind the run's user-role key (:class:`ClawEvalUser`);
``environment.max_turns`` caps the agent's model calls where the harness takes a cap.
Grading builds the trace ClawEval's runner writes (``trace_start``, ``message``,
``tool_dispatch``, ``audit_snapshot``, ``trace_end`` JSONL) and runs the task's own grader
class in a child process with the checkout's ``src/`` first on ``PYTHONPATH``
(``grade_child.py``), scoring with ``claw_eval.models.scoring.compute_task_score``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from openforge.environments.services import Service, TaskServices, ToolRoute
from openforge.suites.claweval.grader import (
    ClawEvalGrader,
    ClawEvalService,
    ClawEvalSpec,
    ClawEvalUser,
)
from openforge.tasks.model import (
    McpServer,
    McpTool,
    MissingFile,
    Task,
    TaskError,
    TaskWarning,
    inside,
    read_yaml_mapping,
    unknown_keys,
)
from openforge.tasks.native import ID_RE

__all__ = ["FIXTURES_ENV", "find_claweval", "load_claweval_checkout", "load_claweval_task"]

# A directory holding the fixtures the GitHub repository leaves out (videos, large documents):
# the benchmark's data release (data/fixtures.tar.gz of huggingface.co/datasets/claw-eval/
# Claw-Eval) extracted. `--claweval-fixtures DIR` on the CLI sets it.
FIXTURES_ENV = "OPENFORGE_CLAWEVAL_FIXTURES"
_REMEDY = (
    "the GitHub repository leaves these out; extract the benchmark's data release "
    "(data/fixtures.tar.gz of huggingface.co/datasets/claw-eval/Claw-Eval) and give its "
    f"directory with --claweval-fixtures DIR (or ${FIXTURES_ENV})"
)

SPLITS = ("general", "multimodal", "multi_turn")
# The fields of claw_eval.models.task.TaskDefinition and its parts, as published: what its own
# loader reads. Anything else in a task.yaml is ignored there too, and named here as a warning.
_TOP = (
    "task_id", "task_name", "version", "category", "difficulty", "prompt", "tools",
    "tool_endpoints", "environment", "scoring_components", "safety_checks", "services",
    "expected_actions", "judge_rubric", "reference_solution", "primary_dimensions", "tags",
    "user_agent", "sandbox_files", "sandbox_grader_files", "env_snapshot_files",
    "env_snapshot_commands", "local_grader_files",
)  # fmt: skip
_PROMPT = ("text", "language", "attachments")
_ENV = (
    "timeout_seconds", "max_turns", "fixtures", "env_snapshot_timeout", "enable_todo",
    "todo_nag_rounds", "enable_compact", "compact_keep_recent", "compact_min_chars",
    "compact_threshold_pct", "compact_keep_recent_on_summary", "compact_protect_tokens",
    "compact_max_auto_compacts",
)  # fmt: skip
_SERVICE = (
    "name", "command", "port", "health_check", "health_check_method", "ready_timeout",
    "reset_endpoint", "env",
)  # fmt: skip
_TOOL = ("name", "description", "input_schema")
_ENDPOINT = ("tool_name", "url", "method")
_USER = ("enabled", "persona", "max_rounds", "system_prompt_suffix")
_MARKER = ("src", "claw_eval", "graders", "base.py")


def find_claweval(path: Path) -> tuple[Path, list[Path]]:
    """``(checkout root, task dirs)`` for a checkout, its ``tasks/`` or one task directory
    (or a file in it, such as its ``task.yaml``)."""
    path = path.resolve()
    if path.is_file():
        path = path.parent
    root = next((c for c in (path, *path.parents) if c.joinpath(*_MARKER).is_file()), None)
    if root is None:
        raise TaskError(
            path / "/".join(_MARKER),
            "(layout)",
            "not a ClawEval checkout: expected src/claw_eval/graders/base.py and tasks/ "
            "(claw-eval/claw-eval)",
        )
    if (path / "task.yaml").is_file():
        return root, [path]
    base = path if path != root else root / "tasks"
    dirs = sorted(d for d in base.iterdir() if d.is_dir() and (d / "task.yaml").is_file())
    if not dirs:
        raise TaskError(base, "(layout)", "no <task>/task.yaml directories")
    return root, dirs


def _mapping(file: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise TaskError(file, key, "must be a mapping")
    return value


def _list(file: Path, data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise TaskError(file, key, "must be a list")
    return value


def _strings(file: Path, data: dict[str, Any], key: str) -> tuple[str, ...]:
    items = _list(file, data, key)
    for i, v in enumerate(items):
        if not isinstance(v, str):
            raise TaskError(file, f"{key}[{i}]", "must be a string")
    return tuple(items)


def _tools(
    file: Path, data: dict[str, Any]
) -> tuple[tuple[dict[str, Any], ...], dict[str, tuple[str, str]]]:
    tools = []
    for i, t in enumerate(_list(file, data, "tools")):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise TaskError(file, f"tools[{i}].name", "missing")
        schema = t.get("input_schema", {})
        if not isinstance(schema, dict):
            raise TaskError(file, f"tools[{i}].input_schema", "must be a JSON Schema mapping")
        tools.append(
            {
                "name": t["name"],
                "description": str(t.get("description", "")),
                "input_schema": schema,
            }
        )
    endpoints: dict[str, tuple[str, str]] = {}
    for i, e in enumerate(_list(file, data, "tool_endpoints")):
        if not isinstance(e, dict) or not all(
            isinstance(e.get(k), str) for k in ("tool_name", "url")
        ):
            raise TaskError(file, f"tool_endpoints[{i}]", "needs string tool_name and url")
        endpoints[e["tool_name"]] = (e["url"], str(e.get("method", "POST")))
    return tuple(tools), endpoints


def _services(file: Path, data: dict[str, Any]) -> tuple[ClawEvalService, ...]:
    out = []
    for i, s in enumerate(_list(file, data, "services")):
        where = f"services[{i}]"
        if not isinstance(s, dict):
            raise TaskError(file, where, "must be a mapping")
        for key in ("name", "command", "health_check"):
            if not isinstance(s.get(key), str):
                raise TaskError(file, f"{where}.{key}", "missing or not a string")
        if isinstance(s.get("port"), bool) or not isinstance(s.get("port"), int):
            raise TaskError(file, f"{where}.port", "must be an integer")
        env = s.get("env") or {}
        if not isinstance(env, dict):
            raise TaskError(file, f"{where}.env", "must be a mapping")
        out.append(
            ClawEvalService(
                name=s["name"],
                command=s["command"],
                port=s["port"],
                health_check=s["health_check"],
                health_check_method=str(s.get("health_check_method", "POST")),
                ready_timeout=float(s.get("ready_timeout", 10)),
                reset_endpoint=s.get("reset_endpoint"),
                env={str(k): str(v) for k, v in env.items()},
            )
        )
    return tuple(out)


def _released(task_dir: Path, rel: str, file: Path, where: str) -> Path | None:
    """``rel`` of the task in the fixtures directory (``$OPENFORGE_CLAWEVAL_FIXTURES``), if
    it holds it: laid out as the repository (``tasks/<task>/fixtures/…``), per task
    (``<task>/fixtures/…`` or ``<task>/…``) or per fixture directory (``fixtures/<task>/…``)."""
    given = os.environ.get(FIXTURES_ENV, "")
    if not given:
        return None
    base, task = Path(given), task_dir.name
    rest = rel.removeprefix("fixtures/")
    for root, sub in (
        (base / "tasks" / task, rel), (base / task, rel), (base / task, rest),
        (base / "fixtures" / task, rest),
    ):  # fmt: skip
        if root.is_dir() and (path := inside(root, sub, file, where)).exists():
            return path
    return None


def _files(
    root: Path,
    task_dir: Path,
    file: Path,
    key: str,
    rels: tuple[str, ...],
    missing: list[tuple[str, str]],
) -> dict[str, Path]:
    """Task-relative files (or, as ClawEval allows, checkout-relative ``tasks/…`` ones), or
    from the fixtures directory for those the repository leaves out; each file found nowhere
    is added to ``missing`` as ``(field, file)``."""
    out: dict[str, Path] = {}
    for i, rel in enumerate(rels):
        path = inside(task_dir, rel, file, f"{key}[{i}]")
        if not path.exists():
            path = inside(root, rel, file, f"{key}[{i}]")
        if not path.exists():
            path = _released(task_dir, rel, file, f"{key}[{i}]") or path
        if not path.exists():
            missing.append((f"{key}[{i}]", rel))
            continue
        if path.is_dir():
            out.update(
                {
                    f"{rel.rstrip('/')}/{p.relative_to(path).as_posix()}": p
                    for p in sorted(path.rglob("*"))
                    if p.is_file()
                }
            )
        else:
            out[rel] = path
    return out


def _number(file: Path, data: dict[str, Any], key: str, default: float, where: str) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskError(file, f"{where}{key}", f"must be a positive number, got {value!r}")
    return float(value)


def _environment(root: Path, file: Path, spec: ClawEvalSpec) -> TaskServices | None:
    """The task's services and tools as run in the sandbox; None for a task with neither.

    The services get ``mock_services/`` and the fixture files their ``env`` names (paths
    relative to the checkout, as ClawEval starts them from its root); nothing else of the
    checkout enters the sandbox, so graders and grader-only files stay out of the agent's
    reach. Tools without an endpoint (``Bash``) are the harness's own shell.
    """
    routes = tuple(
        ToolRoute(t["name"], t["description"], t["input_schema"], *spec.endpoints[t["name"]])
        for t in spec.tools
        if t["name"] in spec.endpoints
    )
    if not spec.services and not routes:
        return None
    files = {
        p.relative_to(root).as_posix(): p
        for p in sorted((root / "mock_services").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    # Never copied for a service, even from a directory it names: the grader and its files.
    hidden = {spec.task_dir / "grader.py", spec.task_dir / "task.yaml"}
    hidden |= {p.resolve() for p in spec.grader_files.values()}
    hidden |= {(spec.task_dir / rel).resolve() for rel in spec.local_grader_files}
    named = [
        (f"services[{i}].env.{k}", v)
        for i, svc in enumerate(spec.services)
        for k, v in svc.env.items()
    ]
    # A service started without a fixture variable reads its default, the task's own
    # fixtures (mock_services/gmail defaults to tasks/<id>/fixtures/gmail/inbox.json).
    if spec.services and (spec.task_dir / "fixtures").is_dir():
        named.append(("(fixtures)", (spec.task_dir / "fixtures").relative_to(root).as_posix()))
    for where, value in named:
        if "/" not in value or value.startswith("/"):
            continue  # not a checkout-relative path (a port, a rate, a mode)
        path = inside(root, value, file, where)
        if path.is_dir():
            for p in sorted(path.rglob("*")):
                if p.is_file() and p.resolve() not in hidden:
                    files[p.relative_to(root).as_posix()] = p
        elif path.is_file():
            files[value] = path
        else:
            raise TaskError(file, where, f"{value!r} not found")
    services = tuple(
        Service(
            s.name,
            s.command,
            s.health_check,
            s.health_check_method,
            s.ready_timeout,
            s.reset_endpoint,
            s.env,
        )
        for s in spec.services
    )
    return TaskServices(services=services, tools=routes, files=files)


def _mcp(env: TaskServices) -> McpServer:
    """The task's tools as the MCP bridge in its sandbox offers them."""
    return McpServer(
        name="task",
        command=env.bridge_command(),
        call=env.bridge_call(),
        tools=tuple(McpTool(t.name, t.description, t.input_schema) for t in env.tools),
    )


def _warnings(file: Path, data: dict[str, Any]) -> tuple[TaskWarning, ...]:
    """The keys of ``task.yaml`` that ClawEval's TaskDefinition does not define."""
    out = unknown_keys(file, data, _TOP)
    tables: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("prompt", _PROMPT), ("environment", _ENV), ("user_agent", _USER)
    )  # fmt: skip
    for key, known in tables:
        out += unknown_keys(file, data.get(key), known, f"{key}.")
    lists: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("services", _SERVICE), ("tools", _TOOL), ("tool_endpoints", _ENDPOINT)
    )  # fmt: skip
    for key, known in lists:
        items = data.get(key)
        for i, item in enumerate(items if isinstance(items, list) else []):
            out += unknown_keys(file, item, known, f"{key}[{i}].")
    return tuple(out)


def _task_id(file: Path, data: dict[str, Any]) -> str:
    """The task's ``task_id``, checked against the ids a task may have."""
    task_id = data.get("task_id")
    if not isinstance(task_id, str) or not ID_RE.match(task_id):
        raise TaskError(file, "task_id", f"must be a string of [A-Za-z0-9._/-], got {task_id!r}")
    return task_id


def _prompt(file: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The task's ``prompt`` mapping, which must carry a non-empty ``text``."""
    prompt = data.get("prompt")
    if (
        not isinstance(prompt, dict)
        or not isinstance(prompt.get("text"), str)
        or not prompt["text"].strip()
    ):
        raise TaskError(
            file, "prompt.text", "missing or empty (ClawEval's prompt is {text, language})"
        )
    return prompt


def _refuse_missing(file: Path, missing: list[tuple[str, str]]) -> None:
    """One error naming every file the task lists that neither it nor the checkout has."""
    if missing:
        where = " or the fixtures directory" if os.environ.get(FIXTURES_ENV) else ""
        named = ", ".join(repr(rel) for _, rel in missing)
        raise MissingFile(
            file, missing[0][0], f"{named} not found in the task or checkout{where}",
            missing=tuple(rel for _, rel in missing), remedy=_REMEDY,
        )  # fmt: skip


def load_claweval_task(root: Path, task_dir: Path) -> Task:
    """One ``tasks/<id>/`` directory of a ClawEval checkout."""
    file = task_dir / "task.yaml"
    data = read_yaml_mapping(file)
    task_id = _task_id(file, data)
    prompt = _prompt(file, data)
    if not (task_dir / "grader.py").is_file():
        raise TaskError(task_dir / "grader.py", "grader.py", "missing: every ClawEval task has one")
    env = _mapping(file, data, "environment")
    tools, endpoints = _tools(file, data)
    for name in endpoints:
        if name not in {t["name"] for t in tools}:
            raise TaskError(file, "tool_endpoints", f"endpoint for undeclared tool {name!r}")
    fixtures = _strings(file, data, "sandbox_files") or _strings(file, env, "fixtures")
    user = _mapping(file, data, "user_agent")
    tags = _strings(file, data, "tags")
    split = (
        "multi_turn"
        if user.get("enabled") is True
        else next((t for t in tags if t in SPLITS), "general")
    )
    missing: list[tuple[str, str]] = []
    workspace = _files(root, task_dir, file, "sandbox_files", fixtures, missing)
    spec = ClawEvalSpec(
        checkout=root,
        task_dir=task_dir,
        task_yaml=file,
        tools=tools,
        endpoints=endpoints,
        services=_services(file, data),
        max_turns=int(_number(file, env, "max_turns", 20, "environment.")),
        grader_files=_files(
            root,
            task_dir,
            file,
            "sandbox_grader_files",
            _strings(file, data, "sandbox_grader_files"),
            missing,
        ),
        snapshot_files=_strings(file, data, "env_snapshot_files"),
        snapshot_commands=_strings(file, data, "env_snapshot_commands"),
        snapshot_timeout_s=_number(file, env, "env_snapshot_timeout", 10, "environment."),
        local_grader_files=_strings(file, data, "local_grader_files"),
        user_agent=user.get("enabled") is True,
    )
    _refuse_missing(file, missing)
    attachments = prompt.get("attachments") or []
    if not isinstance(attachments, list):
        raise TaskError(file, "prompt.attachments", "must be a list")
    services_env = _environment(root, file, spec)
    user_sim, agents_md = _simulated_user(root, file, user)
    web_real = any("web_real" in svc.command for svc in spec.services)
    return Task(
        id=task_id,
        instruction=prompt["text"].strip(),
        path=task_dir,
        format="claweval",
        timeout_s=_number(file, env, "timeout_seconds", 300, "environment."),
        verify_timeout_s=600.0,
        tags=tags,
        split=split,
        category=str(data.get("category") or ""),
        workspace=workspace,
        grader=ClawEvalGrader(spec),
        sidecars=services_env,
        mcp=_mcp(services_env) if services_env else None,
        max_turns=spec.max_turns,
        simulated_user=user_sim,
        workspace_extra=agents_md,
        # ClawEval's web_real service searches the real web: such a task asks for the
        # internet (given only with --allow-task-internet) and cannot be done without it.
        wants_internet=web_real,
        needs_internet="its web_real service searches the real web" if web_real else None,
        warnings=_warnings(file, data),
    )


def _simulated_user(
    root: Path, file: Path, user: dict[str, Any]
) -> tuple[ClawEvalUser | None, dict[str, bytes]]:
    """``user_agent``: the simulated user (``persona``, ``max_rounds`` default 3, as
    ``UserAgentTaskConfig``), and ``system_prompt_suffix`` as the workspace's ``AGENTS.md``:
    ClawEval appends it to its agent's system prompt; a harness's own system prompt is its
    own, and AGENTS.md is where claw, Codex and OpenClaw read a workspace's instructions."""
    if user.get("enabled") is not True:
        return None, {}
    persona = user.get("persona") or ""
    if not isinstance(persona, str) or not persona.strip():
        raise TaskError(file, "user_agent.persona", "missing or empty (the simulated user's)")
    rounds = user.get("max_rounds", 3)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise TaskError(file, "user_agent.max_rounds", "must be a whole number >= 0")
    suffix = user.get("system_prompt_suffix") or ""
    if not isinstance(suffix, str):
        raise TaskError(file, "user_agent.system_prompt_suffix", "must be a string")
    extra = {"AGENTS.md": suffix.encode()} if suffix.strip() else {}
    return ClawEvalUser(root, file, persona, rounds), extra


def load_claweval_checkout(path: Path) -> tuple[list[Task], list[TaskError]]:
    """Every task of a ClawEval checkout; the errors of those that did not load."""
    root, dirs = find_claweval(path)
    tasks: list[Task] = []
    errors: list[TaskError] = []
    for d in dirs:
        try:
            tasks.append(load_claweval_task(root, d))
        except TaskError as exc:
            errors.append(exc)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(TaskError(d / "task.yaml", "(file)", f"cannot be read: {exc}"))
    return tasks, errors
