"""OSWorld-format tasks: ``evaluation_examples/examples/<domain>/<id>.json`` (OSWorld's layout).

Each example's ``config`` steps set up the desktop environment (``launch``, ``execute`` /
``command``, ``sleep``) and its ``evaluator`` runs as the verifier
(:mod:`openforge.suites.osworld.evaluate`, OSWorld's getters and metrics for files and command
output). Examples that need what is not here (a VM snapshot's apps, ``download`` and
``open`` steps, accessibility-tree getters, metrics for office documents) are reported as
errors naming the field, and the rest load. A ``cloud_file`` is looked up as
``files/<dest>`` in the suite's root (download it there once; nothing is fetched).
``test_all.json`` (domain → ids), when present, selects the examples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openforge.environments.desktop import ConfigStep, DesktopEnvironment
from openforge.guest import bundle
from openforge.tasks.model import (
    VERIFY_DIR,
    Task,
    TaskError,
    TaskWarning,
    read_task_data,
    unknown_keys,
)

__all__ = [
    "EVALUATOR",
    "EVALUATOR_COMMAND",
    "EVALUATOR_KEYS",
    "check_evaluator",
    "evaluator_bundle",
    "is_osworld_suite",
    "load_osworld",
]

# The evaluator (the guest program ``osworld_eval``) run as the verifier on the task's JSON,
# which goes beside it as ``task.json`` (a ``cloud_file`` under ``files/`` there).
EVALUATOR = "osworld_eval.pyz"
EVALUATOR_COMMAND = f"python3 -I {VERIFY_DIR}/{EVALUATOR} --task {VERIFY_DIR}/task.json"
_STEPS = {"launch", "execute", "command", "sleep"}
_GETTERS = {"vm_file", "vm_command_line", "rule", "cloud_file"}
_METRICS = {"exact_match", "check_include_exclude", "compare_text_file", "is_in_list", "infeasible"}
# The fields of OSWorld's examples (evaluation_examples/README.md and the published examples);
# any other is named as a warning.
_KEYS = (
    "id", "snapshot", "instruction", "source", "config", "trajectory", "related_apps",
    "evaluator", "proxy", "fixed_ip", "possibility_of_env_change", "_comment",
)  # fmt: skip
EVALUATOR_KEYS = ("func", "result", "expected", "options", "conj", "postconfig")
_STEP = ("type", "parameters")


def evaluator_bundle() -> bytes:
    """The evaluator's zipapp, put in the verifier's directory as :data:`EVALUATOR`."""
    return bundle("osworld_eval")


def _suite_root(path: Path) -> Path | None:
    """The ``evaluation_examples`` directory ``path`` is (or lies in: a domain, an example)."""
    for cand in (path, *path.parents[:3]):
        if (cand / "examples").is_dir() and (cand / "test_all.json").is_file():
            return cand
    return None


def is_osworld_suite(path: Path) -> bool:
    """Whether ``path`` is an OSWorld ``evaluation_examples`` directory, or one of its
    domains or examples."""
    return _suite_root(path.resolve()) is not None


def _steps(file: Path, config: Any) -> tuple[ConfigStep, ...]:
    if not isinstance(config, list):
        raise TaskError(file, "config", "must be a list of steps")
    out = []
    for i, step in enumerate(config):
        kind = step.get("type") if isinstance(step, dict) else None
        params = step.get("parameters") or {} if isinstance(step, dict) else {}
        if kind not in _STEPS:
            raise TaskError(file, f"config[{i}].type", f"{kind!r} is not supported here")
        command = params.get("command", ())
        if kind != "sleep" and not isinstance(command, str | list):
            raise TaskError(file, f"config[{i}].parameters.command", "must be a list or string")
        out.append(
            ConfigStep(
                type=kind,
                command=command if isinstance(command, str) else tuple(map(str, command)),
                shell=bool(params.get("shell")),
                seconds=float(params.get("seconds", 0)),
            )
        )
    return tuple(out)


def check_evaluator(file: Path, ev: Any, root: Path, where: str = "evaluator") -> dict[str, Path]:
    """Validate an OSWorld ``evaluator`` (named ``where`` in errors); the cloud files the
    verifier needs (``files/<dest>`` under ``root``)."""
    if not isinstance(ev, dict) or "func" not in ev:
        raise TaskError(file, where, "must be an object with func")
    funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
    for name in funcs:
        if name not in _METRICS:
            raise TaskError(file, f"{where}.func", f"metric {name!r} is not supported here")
    files: dict[str, Path] = {}
    for key in ("result", "expected"):
        specs = ev.get(key)
        for spec in specs if isinstance(specs, list) else [specs] if specs else []:
            kind = spec.get("type") if isinstance(spec, dict) else None
            if kind not in _GETTERS:
                raise TaskError(file, f"{where}.{key}.type", f"getter {kind!r} not supported")
            if kind == "cloud_file":
                dest = str(spec.get("dest", ""))
                local = root / "files" / dest
                if not dest or "/" in dest or not local.is_file():
                    raise TaskError(file, f"{where}.{key}.dest", f"put the file at {local}")
                files[f"files/{dest}"] = local
    return files


def _load_example(file: Path, domain: str, root: Path) -> Task:
    data = read_task_data(file)
    for key in ("id", "instruction"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise TaskError(file, key, "must be a non-empty string")
    files = check_evaluator(file, data.get("evaluator"), root)
    warnings: list[TaskWarning] = unknown_keys(file, data, _KEYS)
    warnings += unknown_keys(file, data.get("evaluator"), EVALUATOR_KEYS, "evaluator.")
    config = data.get("config")
    for i, step in enumerate(config if isinstance(config, list) else []):
        warnings += unknown_keys(file, step, _STEP, f"config[{i}].")
    return Task(
        id=f"osworld/{domain}/{data['id']}",
        instruction=data["instruction"],
        path=file,
        format="osworld",
        tags=("gui", "desktop", "osworld", domain),
        verify={"task.json": file, **files},
        verify_extra={EVALUATOR: evaluator_bundle()},
        verify_command=EVALUATOR_COMMAND,
        gui=DesktopEnvironment(steps=_steps(file, data.get("config", []))),
        warnings=tuple(warnings),
    )


def load_osworld(path: Path) -> tuple[list[Task], list[TaskError]]:
    """Every example under ``root/examples`` (those in ``test_all.json``); bad ones as errors.

    ``path`` is the ``evaluation_examples`` directory, or one domain's directory or one
    example file in it: then only those load.
    """
    path = path.resolve()
    root = _suite_root(path) or path
    index_file = root / "test_all.json"
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [], [TaskError(index_file, "(json)", str(exc))]
    if not isinstance(index, dict):
        return [], [TaskError(index_file, "(json)", "must map each domain to a list of ids")]
    tasks: list[Task] = []
    errors: list[TaskError] = []
    for domain, ids in sorted(index.items()):
        for ident in ids if isinstance(ids, list) else []:
            file = root / "examples" / str(domain) / f"{ident}.json"
            if path != root and file != path and file.parent != path:
                continue
            try:
                tasks.append(_load_example(file, str(domain), root))
            except TaskError as exc:
                errors.append(exc)
            except OSError as exc:
                errors.append(TaskError(file, "(file)", f"cannot be read: {exc}"))
    return tasks, errors
