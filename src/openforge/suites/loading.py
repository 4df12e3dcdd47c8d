"""Find and load every task under a path, whatever its format; bad tasks are reported, not fatal."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from openforge.tasks.claweval import SPLITS as CLAWEVAL_SPLITS
from openforge.tasks.claweval import find_claweval, load_claweval_checkout
from openforge.tasks.drills import DRILL_SUITE, drill_suite
from openforge.tasks.foreign import load_claweval, load_qwenclawbench
from openforge.tasks.harbor import load_harbor, load_terminal_bench
from openforge.tasks.miniwob import MINIWOB_FILE, MINIWOB_SUITE, load_miniwob, miniwob_suite
from openforge.tasks.model import Task, TaskError
from openforge.tasks.native import load_native
from openforge.tasks.osworld import is_osworld_suite, load_osworld
from openforge.tasks.qwenclawbench import find_checkout, load_qwenclawbench_checkout
from openforge.tasks.webapps import WEBAPP_FILE, WEBAPPS_SUITE, load_webapp, webapps_suite
from openforge.tasks.webjudge import load_mind2web, load_webvoyager

__all__ = ["SUITES", "SUITE_SPLITS", "TaskSet", "builtin_suite", "load_task_dir", "load_tasks"]

# Published suites loaded from the user's checkout: ``load_tasks("KIND:PATH")``.
SUITES: dict[str, Callable[[Path], tuple[list[Task], list[TaskError]]]] = {
    "claweval": load_claweval_checkout,
    "qwenclawbench": load_qwenclawbench_checkout,
    "webvoyager": load_webvoyager,
    "online-mind2web": load_mind2web,
}
# The suites' own splits, beside OpenForge's train and test.
SUITE_SPLITS: tuple[str, ...] = CLAWEVAL_SPLITS


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
    if name == MINIWOB_SUITE:
        return miniwob_suite()
    if name == WEBAPPS_SUITE:
        return webapps_suite()
    path = Path(str(resources.files("openforge.tasks") / name))
    return path if path.is_dir() else None


def _is_task_dir(d: Path) -> bool:
    return any((d / f).is_file() for f in ("task.toml", "task.yaml", MINIWOB_FILE, WEBAPP_FILE))


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
    if (d / MINIWOB_FILE).is_file():
        return load_miniwob(d)
    if (d / WEBAPP_FILE).is_file():
        return load_webapp(d)
    if (d / "task.toml").is_file():
        return load_harbor(d) if _toml_kind(d) == "harbor" else load_native(d)
    if (d / "grader.py").is_file():
        return load_claweval(d)
    return load_terminal_bench(d)


def _suite_kind(root: Path) -> str | None:
    """The published suite a checkout holds, recognised by the files its own code reads."""
    for kind, find in (("claweval", find_claweval), ("qwenclawbench", find_checkout)):
        try:
            find(root)
        except TaskError:
            continue
        return kind
    return None


def _load_suite(kind: str, root: Path, split: str | None) -> TaskSet:
    out = TaskSet()
    try:
        tasks, out.errors = SUITES[kind](root)
    except TaskError as exc:
        out.errors.append(exc)
        return out
    out.tasks = [t for t in tasks if split is None or t.split == split]
    return out


def load_tasks(path: Path | str, split: str | None = None) -> TaskSet:
    """Load every task under ``path`` (a task dir, a suite dir, or a bundled suite's name).

    ``KIND:PATH`` loads a published suite from the user's checkout (:data:`SUITES`:
    ``claweval``, ``qwenclawbench``); a checkout given without the prefix is recognised.
    Malformed tasks land in ``errors`` (file, field, problem) and the rest still load.
    Duplicate ids are errors for every copy after the first. ``split`` keeps only tasks of
    that split (``train`` or ``test``; a suite's own, e.g. ClawEval's ``multi_turn``).
    """
    kind, sep, rest = str(path).partition(":")
    if sep and kind in SUITES:
        return _load_suite(kind, Path(rest), split)
    root = Path(path)
    if root.is_dir() and (found := _suite_kind(root)) is not None:
        return _load_suite(found, root, split)
    if not root.exists() and (bundled := builtin_suite(str(path))) is not None:
        root = bundled
    out = TaskSet()
    if not root.exists():
        out.errors.append(TaskError(root, "(path)", "does not exist"))
        return out
    if is_osworld_suite(root):
        out.tasks, out.errors = load_osworld(root)
        out.tasks = [t for t in out.tasks if split is None or t.split == split]
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
