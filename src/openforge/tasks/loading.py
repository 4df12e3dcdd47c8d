"""Find and load every task under a path, whatever its format; bad tasks are reported, not fatal."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from openforge.tasks.drills import DRILL_SUITE, drill_suite
from openforge.tasks.foreign import load_claweval, load_qwenclawbench
from openforge.tasks.harbor import load_harbor, load_terminal_bench
from openforge.tasks.model import Task, TaskError
from openforge.tasks.native import load_native

__all__ = ["TaskSet", "builtin_suite", "load_task_dir", "load_tasks"]


@dataclass(slots=True)
class TaskSet:
    """The tasks that loaded and the errors of those that did not."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)

    def by_id(self) -> dict[str, Task]:
        """Tasks keyed by id."""
        return {t.id: t for t in self.tasks}


def builtin_suite(name: str) -> Path | None:
    """The path of a suite bundled with OpenForge (``claw-mini``, ``claw-drill``), or None.

    ``claw-drill`` is generated on first use into a cache directory (``tasks/drills.py``).
    """
    if name == DRILL_SUITE:
        return drill_suite()
    path = Path(str(resources.files("openforge.tasks") / name))
    return path if path.is_dir() else None


def _is_task_dir(d: Path) -> bool:
    return (d / "task.toml").is_file() or (d / "task.yaml").is_file()


# Tables and directories only a Harbor task has; a task.toml with one of them (and no
# native ``id``) is read as Harbor, so its loader can say which Harbor file is missing.
_HARBOR_KEYS = frozenset(
    ("schema_version", "version", "task", "metadata", "agent", "verifier", "environment",
     "solution", "steps", "source", "artifacts", "multi_step_reward_strategy")
)  # fmt: skip


def _toml_kind(d: Path) -> str:
    """``native`` or ``harbor`` for a directory holding a task.toml."""
    try:
        data = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError:
        return "native"  # the native loader reports the syntax error
    if "id" in data:
        return "native"
    harbor_dirs = any((d / sub).is_dir() for sub in ("tests", "environment", "steps"))
    if harbor_dirs or (d / "instruction.md").is_file() or _HARBOR_KEYS & data.keys():
        return "harbor"
    return "native"  # says that ``id`` is missing


def load_task_dir(d: Path) -> Task:
    """Load one task directory, choosing its loader by the files it holds."""
    if (d / "task.toml").is_file():
        return load_harbor(d) if _toml_kind(d) == "harbor" else load_native(d)
    if (d / "grader.py").is_file():
        return load_claweval(d)
    return load_terminal_bench(d)


def load_tasks(path: Path | str, split: str | None = None) -> TaskSet:
    """Load every task under ``path`` (a task dir, a suite dir, or a bundled suite's name).

    Malformed tasks land in ``errors`` (file, field, problem) and the rest still load.
    Duplicate ids are errors for every copy after the first. ``split`` keeps only tasks of
    that split (``train`` or ``test``).
    """
    root = Path(path)
    if not root.exists() and (bundled := builtin_suite(str(path))) is not None:
        root = bundled
    out = TaskSet()
    if not root.exists():
        out.errors.append(TaskError(root, "(path)", "does not exist"))
        return out
    candidates: list[tuple[str, Path]] = []
    if root.is_file():
        candidates.append(("md", root))
    else:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            d = Path(dirpath)
            if _is_task_dir(d):
                candidates.append(("dir", d))
                dirnames.clear()
                continue
            dirnames.sort()
            candidates += [
                ("md", d / f)
                for f in sorted(filenames)
                if f.startswith("task_") and f.endswith(".md")
            ]
    suite_root = root if root.is_dir() else root.parent
    seen: set[str] = set()
    for kind, p in candidates:
        try:
            task = load_task_dir(p) if kind == "dir" else load_qwenclawbench(p, suite_root)
        except TaskError as exc:
            out.errors.append(exc)
            continue
        except (OSError, UnicodeDecodeError) as exc:
            out.errors.append(TaskError(p, "(file)", f"cannot be read: {exc}"))
            continue
        if task.id in seen:
            out.errors.append(TaskError(p, "id", f"duplicate task id {task.id!r}"))
            continue
        seen.add(task.id)
        if split is None or task.split == split:
            out.tasks.append(task)
    return out
