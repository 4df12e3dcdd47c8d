"""The native task format: a directory with task.toml, workspace/, verify/ and solution/.

``task.toml``::

    id = "hello-file"                 # required, [A-Za-z0-9._-]
    instruction = "Create hello.txt…" # or an instruction.md beside task.toml
    timeout = 120                     # seconds the agent may run (default 300)
    split = "train"                   # "train" or "test" (held out)
    tags = ["easy", "files"]
    image = "openforge/base"          # container/Kubernetes backends only
    network = "gateway"               # none | gateway | open

    [resources]
    cpu = 1.0
    memory_mb = 512
    pids = 256
    disk_mb = 256

    [verify]
    # Runs with the workdir as cwd; the verifier's files are in $OPENFORGE_VERIFY_DIR.
    command = "python3 $OPENFORGE_VERIFY_DIR/check.py"  # default: verify.sh, else verify.py
    timeout = 60

    [[tools]]                         # optional, repeatable: task tools the harness is told of
    name = "lookup"
    description = "Look a word up in the glossary."
    usage = "python3 tools/lookup.py WORD"   # a command run with the agent's shell tool

A ``[browser]`` or ``[desktop]`` section (a GUI task) is read by the section loaders the
caller passes (``suites/native_gui.py``): the section then brings the task's environment and,
for a browser, its reward, in place of ``verify/``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforge.environments.base import GuiEnvironment
from openforge.tasks.model import VERIFY_DIR, Task, TaskError, TaskTool, check_keys, collect_dir

__all__ = ["ID_RE", "NativeSection", "SectionLoader", "load_native", "number", "string_list"]

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
_NETWORKS = ("none", "gateway", "open")
_SPLITS = ("train", "test")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Every key task.toml may hold, per table: anything else is a TaskError naming the closest.
_TOP_KEYS = (
    "id", "instruction", "timeout", "split", "tags", "image", "network", "resources", "verify",
    "tools",
)  # fmt: skip
_RESOURCE_KEYS = ("cpu", "memory_mb", "pids", "disk_mb")
_VERIFY_KEYS = ("command", "timeout")
_TOOL_KEYS = ("name", "description", "usage")


@dataclass(frozen=True, slots=True)
class NativeSection:
    """What a GUI section of ``task.toml`` (``[browser]``, ``[desktop]``) adds to the task.

    ``verify_command`` set: the section brings the reward (then ``verify/`` and ``[verify]``
    are refused, so a task never has two); empty: the task's own ``verify/`` scores it.
    ``workspace`` entries must not collide with the task's ``workspace/`` files.
    """

    gui: GuiEnvironment
    workspace: dict[str, Path] = field(default_factory=dict)
    verify: dict[str, Path] = field(default_factory=dict)
    verify_extra: dict[str, bytes] = field(default_factory=dict)
    verify_command: str = ""
    tags: tuple[str, ...] = ()


# (task.toml, the task directory, the section's table) -> what it adds; TaskError when bad.
SectionLoader = Callable[[Path, Path, dict[str, Any]], NativeSection]


def number(
    file: Path, table: dict[str, Any], key: str, default: float | None, prefix: str = ""
) -> float | None:
    """A positive number from ``table[key]`` or ``default``; a TaskError names the field."""
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskError(file, prefix + key, f"must be a positive number, got {value!r}")
    return float(value)


def string_list(file: Path, value: Any, field_name: str) -> tuple[str, ...]:
    """A list of strings, or a TaskError naming the field."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(file, field_name, f"must be a list of strings, got {value!r}")
    return tuple(value)


def _tools(file: Path, value: Any) -> tuple[TaskTool, ...]:
    """``[[tools]]`` tables (name, description, usage), or a TaskError naming the entry."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise TaskError(file, "tools", "must be an array of tables ([[tools]])")
    out: list[TaskTool] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise TaskError(file, f"tools[{i}]", "must be a table with name, description, usage")
        check_keys(file, entry, _TOOL_KEYS, f"tools[{i}].")
        fields: dict[str, str] = {}
        for key in ("name", "description", "usage"):
            got = entry.get(key)
            if not isinstance(got, str) or not got.strip():
                raise TaskError(
                    file, f"tools[{i}].{key}", f"must be a non-empty string, got {got!r}"
                )
            fields[key] = got.strip()
        if not _TOOL_NAME.match(fields["name"]):
            raise TaskError(
                file, f"tools[{i}].name", f"must be [A-Za-z0-9_.-], got {fields['name']!r}"
            )
        out.append(TaskTool(**fields))
    return tuple(out)


def _int(file: Path, table: dict[str, Any], key: str) -> int | None:
    value = number(file, table, key, None, "resources.")
    return None if value is None else int(value)


def _section(
    file: Path, root: Path, data: dict[str, Any], loaders: Mapping[str, SectionLoader]
) -> NativeSection | None:
    """The one GUI section ``data`` holds, loaded; None when it holds none."""
    given = [name for name in loaders if name in data]
    if len(given) > 1:
        raise TaskError(file, given[1], f"a task has one GUI environment: {given[0]} or {given[1]}")
    if not given:
        return None
    table = data[given[0]]
    if not isinstance(table, dict):
        raise TaskError(file, given[0], f"must be a table ([{given[0]}])")
    return loaders[given[0]](file, root, table)


def _read_task_toml(file: Path) -> dict[str, Any]:
    """``task.toml`` parsed; TaskError when it is not TOML or cannot be read."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(file, "(toml)", f"not valid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(file, "(file)", f"cannot be read: {exc}") from exc


def _instruction(file: Path, root: Path, data: dict[str, Any]) -> str:
    """``instruction`` from task.toml, else instruction.md; it must not be empty."""
    instruction = data.get("instruction")
    md = root / "instruction.md"
    if instruction is None and md.is_file():
        instruction = md.read_text(encoding="utf-8")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskError(file, "instruction", "missing or empty (or add instruction.md)")
    return instruction


def _verify_command(
    file: Path,
    root: Path,
    data: dict[str, Any],
    verify: dict[str, Any],
    verify_files: dict[str, Path],
    gui: NativeSection | None,
) -> str:
    """The command that verifies: the GUI section's, [verify] command, or verify/'s script."""
    command = verify.get("command")
    if gui is not None and gui.verify_command:
        if verify or verify_files:
            name = "browser" if "browser" in data else "desktop"
            where = "verify" if verify else "verify/"
            raise TaskError(
                file, where, f"the [{name}] section brings this task's reward: drop {where}"
            )
        command = gui.verify_command
    if command is None:
        if "verify.sh" in verify_files:
            command = f"sh {VERIFY_DIR}/verify.sh"
        elif "verify.py" in verify_files:
            command = f"python3 {VERIFY_DIR}/verify.py"
        else:
            raise TaskError(
                root / "verify",
                "verify/",
                "needs verify.sh or verify.py (or [verify] command in task.toml)",
            )
    if not isinstance(command, str):
        raise TaskError(file, "verify.command", f"must be a string, got {command!r}")
    return command


def load_native(root: Path, sections: Mapping[str, SectionLoader] | None = None) -> Task:
    """Load a native task directory; raise :class:`TaskError` naming file and field.

    ``sections`` are the loaders of the GUI sections (``browser``, ``desktop``) this caller
    knows; any other key is refused as unknown.
    """
    loaders = dict(sections or {})
    file = root / "task.toml"
    data = _read_task_toml(file)
    check_keys(file, data, (*_TOP_KEYS, *loaders))
    task_id = data.get("id")
    if not isinstance(task_id, str) or not ID_RE.match(task_id):
        raise TaskError(file, "id", f"must be a string of [A-Za-z0-9._/-], got {task_id!r}")
    instruction = _instruction(file, root, data)
    network = data.get("network", "gateway")
    if network not in _NETWORKS:
        raise TaskError(file, "network", f"must be one of {_NETWORKS}, got {network!r}")
    split = data.get("split", "train")
    if split not in _SPLITS:
        raise TaskError(file, "split", f"must be one of {_SPLITS}, got {split!r}")
    image = data.get("image")
    if image is not None and not isinstance(image, str):
        raise TaskError(file, "image", f"must be a string, got {image!r}")
    resources = data.get("resources", {})
    if not isinstance(resources, dict):
        raise TaskError(file, "resources", "must be a table")
    check_keys(file, resources, _RESOURCE_KEYS, "resources.")
    verify = data.get("verify", {})
    if not isinstance(verify, dict):
        raise TaskError(file, "verify", "must be a table")
    check_keys(file, verify, _VERIFY_KEYS, "verify.")

    gui = _section(file, root, data, loaders)
    verify_files = collect_dir(root, "verify", "verify/")
    command = _verify_command(file, root, data, verify, verify_files, gui)

    timeout = number(file, data, "timeout", 300.0)
    verify_timeout = number(file, verify, "timeout", 120.0, "verify.")
    assert timeout is not None and verify_timeout is not None
    cpu = number(file, resources, "cpu", None, "resources.")
    workspace = collect_dir(root, "workspace", "workspace/")
    if gui is not None:
        clash = sorted(workspace.keys() & gui.workspace.keys())
        if clash:
            raise TaskError(root / "workspace", "workspace/", f"{clash[0]} is the site's path")
        workspace.update(gui.workspace)
    return Task(
        id=task_id,
        instruction=instruction.strip(),
        path=root,
        format="native",
        timeout_s=timeout,
        verify_timeout_s=verify_timeout,
        cpu=cpu,
        memory_mb=_int(file, resources, "memory_mb"),
        pids=_int(file, resources, "pids"),
        disk_mb=_int(file, resources, "disk_mb"),
        image=image,
        network=network,
        tags=(*string_list(file, data.get("tags"), "tags"), *(gui.tags if gui else ())),
        split=split,
        workspace=workspace,
        verify={**verify_files, **(gui.verify if gui else {})},
        verify_command=command,
        verify_extra=dict(gui.verify_extra) if gui else {},
        solution=collect_dir(root, "solution", "solution/"),
        tools=_tools(file, data.get("tools")),
        gui=gui.gui if gui else None,
    )
