"""Choosing some of a suite's tasks: by id or glob, leaving some out, the first N or a sample.

One function serves every command that runs tasks (``openforge rollout``, ``eval``, ``tasks
check``, ``images build``) and the training config, so ``--task 'cpp-*' --exclude '*-unit-*'
--limit 5`` means the same everywhere. The order is fixed: keep the tasks matching any
``--task`` pattern (all when none is given), drop those matching any ``--exclude``, draw
``--sample N`` of them with ``--seed S``, then keep the first ``--limit N``. Tasks keep the
suite's order throughout, so the same options pick the same tasks in the same order.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from openforge.suites.loading import TaskSet, load_tasks
from openforge.tasks.model import Task

__all__ = ["CLI_NAMES", "SelectionError", "TaskSelection", "load_selected", "select_tasks"]

# What each part of a selection is called on the command line, for error messages; the
# training config passes its own key names.
CLI_NAMES = {
    "include": "--task",
    "exclude": "--exclude",
    "limit": "--limit",
    "sample": "--sample",
}
_GLOB = frozenset("*?[")


class SelectionError(ValueError):
    """Nothing (or nothing sensible) was selected; ``option`` names the culprit."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"{option}: {problem}")


@dataclass(frozen=True, slots=True)
class TaskSelection:
    """Which tasks to run. The default selects every task."""

    include: tuple[str, ...] = ()  # task ids or globs (fnmatch); () means every task
    exclude: tuple[str, ...] = ()  # globs of ids to leave out
    limit: int | None = None  # the first N after the rest
    sample: int | None = None  # N drawn at random (with ``seed``), kept in suite order
    seed: int = 0

    @property
    def everything(self) -> bool:
        """True when this selection keeps every task."""
        return self == TaskSelection(seed=self.seed)


def _hint(pattern: str, ids: Sequence[str]) -> str:
    close = difflib.get_close_matches(pattern, ids, n=3, cutoff=0.5)
    if close:
        return "; did you mean " + ", ".join(repr(c) for c in close) + "?"
    shown = ", ".join(ids[:5]) + (", …" if len(ids) > 5 else "")
    return f" (ids: {shown})" if ids else " (no tasks loaded)"


def select_tasks(
    tasks: Sequence[Task], selection: TaskSelection, names: dict[str, str] | None = None
) -> list[Task]:
    """The tasks ``selection`` keeps, in the order given.

    Raises :class:`SelectionError` naming the option (``names`` maps ``include``,
    ``exclude``, ``limit`` and ``sample`` to what the caller calls them; CLI spellings by
    default) when a ``--task`` pattern matches no task, when nothing is left, or for a
    count below 1.
    """
    named = {**CLI_NAMES, **(names or {})}
    for part in ("limit", "sample"):
        value = getattr(selection, part)
        if value is not None and value < 1:
            raise SelectionError(named[part], f"must be at least 1, got {value}")
    ids = [t.id for t in tasks]
    kept = list(tasks)
    if selection.include:
        for pattern in selection.include:
            if not any(fnmatchcase(i, pattern) for i in ids):
                what = "no task id matches" if _GLOB & set(pattern) else "no task has the id"
                raise SelectionError(named["include"], f"{what} {pattern!r}{_hint(pattern, ids)}")
        kept = [t for t in kept if any(fnmatchcase(t.id, p) for p in selection.include)]
    if selection.exclude:
        kept = [t for t in kept if not any(fnmatchcase(t.id, p) for p in selection.exclude)]
        if not kept and tasks:
            shown = " ".join(repr(p) for p in selection.exclude)
            raise SelectionError(named["exclude"], f"{shown} leaves no task to run")
    if selection.sample is not None and selection.sample < len(kept):
        chosen = set(random.Random(selection.seed).sample(range(len(kept)), selection.sample))
        kept = [t for i, t in enumerate(kept) if i in chosen]
    if selection.limit is not None:
        kept = kept[: selection.limit]
    return kept


def load_selected(
    path: str,
    selection: TaskSelection,
    split: str | None = None,
    names: dict[str, str] | None = None,
) -> TaskSet:
    """:func:`load_tasks` then :func:`select_tasks`: the selected tasks, every load error.

    Raises :class:`SelectionError` as :func:`select_tasks` does.
    """
    loaded = load_tasks(path, split)
    loaded.tasks = select_tasks(loaded.tasks, selection, names)
    return loaded
