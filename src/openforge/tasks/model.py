"""The canonical task every loader produces, and the checks that keep a task inside its directory.

Exceptions::

    TaskError          a task could not be loaded: names the file, the field and what is wrong
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, overload

import yaml

from openforge.environments.base import GuiEnvironment
from openforge.guest import source
from openforge.sandboxes.base import NetworkPolicy, Sandbox, ServiceContainer
from openforge.tasks.grading import SimulatedUser, SuiteGrader

__all__ = [
    "VERIFY_DIR",
    "Healthcheck",
    "McpServer",
    "McpTool",
    "MissingFile",
    "Sidecars",
    "Task",
    "TaskEnvironment",
    "TaskError",
    "TaskStep",
    "TaskTool",
    "TaskWarning",
    "TestsVerifier",
    "check_keys",
    "collect_dir",
    "inside",
    "read_task_data",
    "read_yaml_mapping",
    "unknown_keys",
]

# Where the verifier's files are put in the sandbox (relative to the workdir), after the
# agent has stopped, so the agent can neither read nor pre-empt them.
VERIFY_DIR = ".openforge-verify"
# Put beside every verifier, so verifiers can ``import openforge_verify`` (done, read, …).
VERIFY_LIB = source("openforge_verify")


class TaskError(Exception):
    """A task could not be loaded. ``str()`` reads ``FILE: FIELD: what is wrong``."""

    def __init__(self, file: Path | str, field_name: str, problem: str) -> None:
        self.file = str(file)
        self.field = field_name
        self.problem = problem
        super().__init__(f"{self.file}: {field_name}: {problem}")


class MissingFile(TaskError):
    """A file a published task names that its repository leaves out (a video kept elsewhere).

    ``missing`` are the files as the task names them and ``remedy`` how to supply them (the
    same for every such file of a suite), so a run names them all once, not once per task.
    """

    def __init__(self, file: Path | str, field_name: str, problem: str,
                 missing: tuple[str, ...], remedy: str) -> None:  # fmt: skip
        super().__init__(file, field_name, problem)
        self.missing = missing
        self.remedy = remedy


@dataclass(frozen=True, slots=True)
class TaskWarning:
    """A key a foreign format's loader does not know: ignored, said out loud, never fatal.

    The publisher's files are the truth, so a key our loader has not heard of is not the
    user's mistake; ``str()`` reads ``FILE: KEY: what happened`` like a :class:`TaskError`.
    """

    file: str
    key: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.problem}"


@dataclass(frozen=True, slots=True)
class TaskTool:
    """A task-specific tool, exposed as a command the agent runs with its shell tool.

    Harnesses that take no custom tools learn of it from a file in the workspace
    (``AGENTS.md``, ``CLAUDE.md`` or a ``SKILL.md``), as OpenForgeRL did for OpenClaw
    and Codex; the orchestrator asks the adapter to write it (``add_tools``).
    """

    name: str
    description: str
    usage: str  # the shell command line, e.g. "python3 tools/lookup.py QUERY"


@dataclass(frozen=True, slots=True)
class Healthcheck:
    """A command that must pass before the agent starts (``[environment.healthcheck]``, a
    step's ``[steps.healthcheck]``), polled as Docker's ``HEALTHCHECK`` is: a failure within
    ``start_period_s`` does not count (the next try comes ``start_interval_s`` later), after
    it ``retries`` consecutive failures, ``interval_s`` apart, mean unhealthy; a try longer
    than ``timeout_s`` fails."""

    command: str
    interval_s: float = 5.0
    timeout_s: float = 30.0
    start_period_s: float = 0.0
    retries: int = 3
    start_interval_s: float = 5.0


@dataclass(frozen=True, slots=True)
class TaskEnvironment:
    """The environment a task brings: an image built from its own Dockerfile, or a named one.

    ``context`` is the build context (Harbor's ``environment/``, Terminal-Bench's task dir);
    ``dockerfile`` the file to build; ``image`` a prebuilt reference (``docker_image``) used
    when there is nothing to build. ``workdir`` is where the agent starts and the tests look
    (``[environment].workdir``, else the Dockerfile's last ``WORKDIR``); ``env`` is set for
    the agent, the verifier and the oracle alike.
    """

    context: Path | None = None
    dockerfile: Path | None = None
    image: str | None = None
    build_timeout_s: float = 600.0
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    # Context-relative paths kept out of the image (tests and solutions in the context).
    hidden: tuple[str, ...] = ()
    # A directory of the environment holding skills (``<name>/SKILL.md``, Harbor's
    # ``skills_dir``): copied into the harness's own skills directory before it starts.
    skills_dir: str | None = None
    # Sidecars sharing the sandbox's network (Harbor's compose services besides ``main``).
    services: tuple[ServiceContainer, ...] = ()


@dataclass(frozen=True, slots=True)
class TestsVerifier:
    """Harbor's verifier contract (and Terminal-Bench's, with ``parser="pytest"``).

    ``tests`` is copied to ``/tests``; ``bash /tests/<entry>`` runs in the agent's own
    environment after the agent stopped, with ``env``; the reward is read from
    ``/logs/verifier/reward.txt`` or ``reward.json`` (``parser="reward-file"``) or from the
    pytest summary the tests printed (``parser="pytest"``, Terminal-Bench's ``parser_name``).
    Several reward keys: ``reward_key`` picks one, else ``reward`` if present, else their mean.
    """

    tests: dict[str, Path]
    entry: str = "test.sh"
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    parser: str = "reward-file"
    reward_key: str | None = None


@dataclass(frozen=True, slots=True)
class TaskStep:
    """One step of a multi-step task: its own instruction, files, verifier and gate.

    ``files`` go to the workdir before the step's agent starts (``setup.sh`` among them is
    run there first); ``healthcheck`` must then pass before the step's agent starts;
    ``min_reward`` ends the episode after this step when the step's reward (a float) or any
    named key (a dict) falls below it.
    """

    name: str
    instruction: str
    timeout_s: float
    verifier: TestsVerifier
    files: dict[str, Path] = field(default_factory=dict)
    solution: dict[str, Path] = field(default_factory=dict)
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool of a task's MCP server, as the model sees it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class McpServer:
    """A task's tools as one stdio MCP server inside the sandbox (``guest/mcp_bridge``).

    Harnesses that take MCP servers start ``command``; the built-in claw agent, which takes
    tools natively, runs ``call + (tool name,)`` with the arguments as JSON on stdin.
    """

    name: str
    command: tuple[str, ...]
    call: tuple[str, ...]
    tools: tuple[McpTool, ...]


class Sidecars(Protocol):
    """What a task runs beside the harness in its sandbox (services, the MCP bridge)."""

    async def prepare(self, sandbox: Sandbox) -> None:
        """Put the environment's files in the sandbox before the harness is configured."""
        ...

    def wrap(self, argv: list[str]) -> list[str]:
        """The harness's launch, wrapped so the environment runs around it."""
        ...


@dataclass(slots=True)
class Task:
    """One task, whatever format it came from.

    ``workspace`` maps sandbox-relative paths to files on the host (copied before the agent
    starts); ``verify`` maps paths relative to :data:`VERIFY_DIR` to host files (copied after
    the agent stops). ``verify_command`` runs with the workdir as its cwd and must print
    ``{"reward": float in [0, 1], "details": ...}`` as the last line of its stdout.
    """

    id: str
    instruction: str
    path: Path
    format: str = "native"
    timeout_s: float = 300.0
    verify_timeout_s: float = 120.0
    cpu: float | None = None
    memory_mb: int | None = None
    pids: int | None = None
    disk_mb: int | None = None
    image: str | None = None
    network: NetworkPolicy = "gateway"
    tags: tuple[str, ...] = ()
    split: str = "train"
    workspace: dict[str, Path] = field(default_factory=dict)
    verify: dict[str, Path] = field(default_factory=dict)
    verify_command: str = ""
    # Extra files written next to the verifier (generated wrappers), path -> content.
    verify_extra: dict[str, bytes] = field(default_factory=dict)
    solution: dict[str, Path] = field(default_factory=dict)
    # Task tools (commands in the workspace) the harness is told about before it starts.
    tools: tuple[TaskTool, ...] = ()
    # Foreign suites' own environment and verifier contract (Harbor, Terminal-Bench).
    environment: TaskEnvironment | None = None
    tests: TestsVerifier | None = None
    # Multi-step tasks: the steps in order and how their rewards roll up ("mean" | "final").
    steps: tuple[TaskStep, ...] = ()
    step_reward: str = "mean"
    solution_env: dict[str, str] = field(default_factory=dict)
    # The task asked for the open internet (Harbor ``allow_internet``); honoured only when
    # the run allows it, and reported either way.
    wants_internet: bool = False
    # Why the task cannot be done at all without the internet (a service that calls the
    # real web): run without it, a rollout is infra_error, never a reward.
    needs_internet: str | None = None
    # Things the loader accepted but does not act on, said out loud (e.g. ``artifacts``).
    notes: tuple[str, ...] = ()
    # Keys of a foreign format the loader does not know, ignored (shown once per suite).
    warnings: tuple[TaskWarning, ...] = ()
    # The GUI setting: a browser or desktop the orchestrator starts beside the harness.
    gui: GuiEnvironment | None = None

    # The suite's own category of the task (ClawEval ``category``, QwenClawBench ``category``),
    # for per-category metrics.
    category: str = ""
    # Workspace files given inline by the task (sandbox path -> content).
    workspace_extra: dict[str, bytes] = field(default_factory=dict)
    # Replaces ``verify_command`` for suites whose own grader runs on the host.
    grader: SuiteGrader | None = None
    # Services and tools that run beside the harness (ClawEval's mock services and tools).
    sidecars: Sidecars | None = None
    mcp: McpServer | None = None
    # The suite's cap on the agent's model calls over the whole task (ClawEval
    # ``environment.max_turns``), given to harnesses that take one (``TakesTurnLimit``).
    max_turns: int | None = None
    # Multi-turn tasks: the user who answers the agent between its turns.
    simulated_user: SimulatedUser | None = None

    @property
    def workdir(self) -> str | None:
        """The task's own workdir, when its environment names one."""
        return self.environment.workdir if self.environment else None

    def workspace_bytes(self) -> dict[str, bytes]:
        """The workspace's files, read now (inline entries included)."""
        out = {rel: p.read_bytes() for rel, p in self.workspace.items()}
        out.update(self.workspace_extra)
        return out

    def verify_bytes(self) -> dict[str, bytes]:
        """The verifier's files as sandbox paths (under :data:`VERIFY_DIR`) to content."""
        out = {f"{VERIFY_DIR}/{VERIFY_LIB.name}": VERIFY_LIB.read_bytes()}
        out.update({f"{VERIFY_DIR}/{rel}": p.read_bytes() for rel, p in self.verify.items()})
        out.update({f"{VERIFY_DIR}/{rel}": data for rel, data in self.verify_extra.items()})
        return out

    def solution_bytes(self) -> dict[str, bytes]:
        """The reference solution's files (``solve.sh`` and anything beside it)."""
        return {rel: p.read_bytes() for rel, p in self.solution.items()}


def inside(root: Path, rel: str, file: Path, field_name: str) -> Path:
    """Resolve ``rel`` under ``root``, refusing absolute paths, ``..`` and symlinks out."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or rel.startswith("~"):
        raise TaskError(file, field_name, f"absolute path {rel!r} is not allowed")
    if ".." in pure.parts:
        raise TaskError(file, field_name, f"path {rel!r} escapes the task directory")
    target = (root / pure).resolve()
    if not target.is_relative_to(root.resolve()):
        raise TaskError(file, field_name, f"path {rel!r} leads outside the task directory")
    return target


def collect_dir(root: Path, sub: str, field_name: str) -> dict[str, Path]:
    """Every regular file under ``root/sub`` as relative path -> path; symlinks out refused."""
    base = root / sub
    if not base.is_dir():
        return {}
    real_root = root.resolve()
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink() and not p.resolve().is_relative_to(real_root):
                raise TaskError(p, field_name, "symlink points outside the task directory")
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_file():
                out[p.relative_to(base).as_posix()] = p
    return out


@overload
def read_task_data(file: Path, expect: type[list[Any]]) -> list[Any]: ...


@overload
def read_task_data(file: Path, expect: type[dict[str, Any]] = ...) -> dict[str, Any]: ...


def read_task_data(file: Path, expect: type = dict) -> Any:
    """``file`` parsed, as TOML when it is ``*.toml`` and else as JSON, whose top level must
    be an ``expect`` (a table, or a list of tasks): else a :class:`TaskError` at ``(toml)``
    or ``(json)`` saying what is wrong with the file, never a decoder's stack trace."""
    kind = "toml" if file.suffix == ".toml" else "json"
    try:
        text = file.read_text(encoding="utf-8")
        data = tomllib.loads(text) if kind == "toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskError(file, f"({kind})", str(exc)) from exc
    if not isinstance(data, expect):
        wanted = "a list of tasks" if expect is list else "an object"
        raise TaskError(file, f"({kind})", f"must be {wanted}")
    return data


def check_keys(
    file: Path, table: Mapping[str, object], known: Collection[str], prefix: str = ""
) -> None:
    """Refuse a key of ``table`` that is not in ``known``, naming the closest known one.

    A misspelled key (``timout``, ``[verfy]``) would otherwise be ignored and its default
    used without a word; ``prefix`` is the table's dotted path (``"verify."``).
    """
    for key in table:
        if key in known:
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        choices = ", ".join(sorted(known))
        raise TaskError(file, prefix + key, f"unknown key{hint} (known keys: {choices})")


def unknown_keys(
    file: Path, table: object, known: Collection[str], prefix: str = ""
) -> list[TaskWarning]:
    """A warning per key of ``table`` (when it is a mapping) that is not in ``known``.

    For foreign formats, whose published files may carry keys a newer or older version of
    their own loader reads: the key is ignored and named, with the closest known one, so a
    user sees what was not acted on without the task being refused.
    """
    if not isinstance(table, Mapping):
        return []
    out = []
    for key in table:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.6)
        hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
        out.append(TaskWarning(str(file), f"{prefix}{key}", f"unknown key, ignored{hint}"))
    return out


def read_yaml_mapping(file: Path) -> dict[str, Any]:
    """``file`` read as a YAML mapping; TaskError (``(yaml)``) when it is not one.

    A file that cannot be read raises OSError (or UnicodeDecodeError), which loading reports
    as a file that cannot be read.
    """
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TaskError(file, "(yaml)", f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskError(file, "(yaml)", "must be a mapping")
    return data
