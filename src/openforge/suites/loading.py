"""Find and load every task under a path, whatever its format; bad tasks are reported, not fatal."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from openforge.suites.catalog import BY_NAME, SUITES
from openforge.suites.harbor import TERMINAL_BENCH
from openforge.suites.suite import Checkout, TaskDirs, TaskFiles
from openforge.tasks.model import MissingFile, Task, TaskError, TaskWarning

__all__ = [
    "TaskSet", "builtin_suite", "error_lines", "load_task_dir", "load_tasks", "warning_lines",
]  # fmt: skip


@dataclass(slots=True)
class TaskSet:
    """The tasks that loaded and the errors of those that did not."""

    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)

    def by_id(self) -> dict[str, Task]:
        """Tasks keyed by id."""
        return {t.id: t for t in self.tasks}

    @property
    def warnings(self) -> list[TaskWarning]:
        """The keys of the (selected) tasks' files that their loaders ignored, unknown."""
        return [w for t in self.tasks for w in t.warnings]


# Entry indices (steps[3], line 7) differ between tasks that share a problem.
_INDEX = re.compile(r"\[\d+\]|line \d+")


def warning_lines(tasks: Iterable[Task]) -> list[str]:
    """The tasks' warnings, one line per suite and problem however many tasks share it.

    ``terminal-bench: task.yaml: language: unknown key, ignored (63 tasks, e.g. FILE)``: a
    published dataset whose every task carries a key the loader does not read is one line,
    naming the file name, the key and one file that has it.
    """
    groups: dict[tuple[str, str, str, str], dict[str, str]] = {}
    for task in tasks:
        for w in task.warnings:
            key = _INDEX.sub(lambda m: "line *" if m.group().startswith("l") else "[*]", w.key)
            group = groups.setdefault((task.format, Path(w.file).name, key, w.problem), {})
            group.setdefault(task.id, w.file)
    out = []
    for (fmt, name, key, problem), files in groups.items():
        first = next(iter(files.values()))
        where = f"{fmt}: {first}" if len(files) == 1 else f"{fmt}: {name}"
        many = "" if len(files) == 1 else f" ({len(files)} tasks, e.g. {first})"
        out.append(f"{where}: {key}: {problem}{many}")
    return out


def error_lines(errors: Iterable[TaskError]) -> list[str]:
    """A line per task that did not load, but files a suite's repository leaves out (each a
    :class:`MissingFile`) named once: each file with how many tasks need it, and the remedy.
    """
    out: list[str] = []
    missing: dict[str, dict[str, int]] = {}  # remedy -> file -> tasks needing it
    tasks: dict[str, set[str]] = {}
    for err in errors:
        if isinstance(err, MissingFile):
            files = missing.setdefault(err.remedy, {})
            for name in err.missing:
                files[name] = files.get(name, 0) + 1
            tasks.setdefault(err.remedy, set()).add(err.file)
        else:
            out.append(f"skipping task {err}")
    for remedy, files in missing.items():
        named = ", ".join(f"{f} ({n} task{'s' * (n > 1)})" for f, n in files.items())
        out.append(
            f"skipping {len(tasks[remedy])} task(s) whose files are missing: {named}; {remedy}"
        )
    return out


def builtin_suite(name: str) -> Path | None:
    """The path of a suite bundled with OpenForge (``claw-mini``, ``claw-drill``, …), or None.

    A generated suite is written into a cache directory on first use.
    """
    suite = BY_NAME.get(name)
    return suite.bundled() if suite is not None and suite.bundled is not None else None


def _claimed(d: Path) -> TaskDirs | None:
    """The task directories of the first suite that claims ``d``."""
    return next((s.task_dirs for s in SUITES if s.task_dirs and s.task_dirs.claims(d)), None)


def load_task_dir(d: Path) -> Task:
    """Load one task directory, choosing its suite by the files it holds."""
    dirs = _claimed(d) or TERMINAL_BENCH.task_dirs  # Terminal-Bench names the task.yaml it lacks
    assert dirs is not None  # TERMINAL_BENCH declares task_dirs
    return dirs.load(d)


def _recognised(root: Path) -> Checkout | None:
    """The checkout of the published suite ``root`` holds, recognised by the files its own
    code reads."""
    for suite in SUITES:
        if suite.checkout and suite.checkout.recognise and suite.checkout.recognise(root):
            return suite.checkout
    return None


def _task_files(name: str) -> TaskFiles | None:
    """The task files of the first suite whose pattern matches the file name ``name``."""
    return next(
        (s.task_files for s in SUITES if s.task_files and fnmatchcase(name, s.task_files.glob)),
        None,
    )


def _load_checkout(checkout: Checkout, root: Path, split: str | None) -> TaskSet:
    out = TaskSet()
    try:
        tasks, out.errors = checkout.load(root)
    except TaskError as exc:
        out.errors.append(exc)
        return out
    out.tasks = [t for t in tasks if split is None or t.split == split]
    return out


def _in_suite(files: TaskFiles, suite_root: Path) -> Callable[[Path], Task]:
    return lambda file: files.load(file, suite_root)


def _candidates(root: Path) -> list[tuple[Callable[[Path], Task], Path]]:
    """Every task under ``root`` with the loader for it, in a stable order."""
    if root.is_file():
        # A single file is a task file of the first suite that has them.
        files = next(s.task_files for s in SUITES if s.task_files)
        return [(_in_suite(files, root.parent), root)]
    found: list[tuple[Callable[[Path], Task], Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        d = Path(dirpath)
        if (dirs := _claimed(d)) is not None:
            found.append((dirs.load, d))
            dirnames.clear()
            continue
        dirnames.sort()
        for name in sorted(filenames):
            if (files_here := _task_files(name)) is not None:
                found.append((_in_suite(files_here, root), d / name))
    return found


def load_tasks(path: Path | str, split: str | None = None) -> TaskSet:
    """Load every task under ``path`` (a task dir, a suite dir, or a bundled suite's name).

    ``KIND:PATH`` loads a published suite from the user's checkout (a suite of
    :data:`~openforge.suites.catalog.SUITES` with a checkout: ``claweval``,
    ``qwenclawbench``, ``osworld``, ``webvoyager``, ``online-mind2web``); a checkout given
    without the prefix is recognised, and so is one task inside it (a QwenClawBench task
    file, a ClawEval task directory, an OSWorld example), which loads alone with the
    checkout's assets. Malformed tasks land in ``errors`` (file, field,
    problem) and the rest still load. Duplicate ids are errors for every copy after the
    first. ``split`` keeps only tasks of that split (``train`` or ``test``; a suite's own,
    e.g. ClawEval's ``multi_turn``).
    """
    kind, sep, rest = str(path).partition(":")
    if sep and (named := BY_NAME.get(kind)) is not None and named.checkout is not None:
        return _load_checkout(named.checkout, Path(rest), split)
    root = Path(path)
    # A checkout, or one task of it (a task file or directory inside), loads through the
    # checkout's own loader, so the task finds its suite's assets.
    if root.exists() and (found := _recognised(root)) is not None:
        return _load_checkout(found, root, split)
    if not root.exists() and (bundled := builtin_suite(str(path))) is not None:
        root = bundled
    out = TaskSet()
    if not root.exists():
        out.errors.append(TaskError(root, "(path)", "does not exist"))
        return out
    seen: set[str] = set()
    for load, p in _candidates(root):
        try:
            task = load(p)
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
