"""What a benchmark declares about itself, in one typed object per suite.

:func:`openforge.suites.load_tasks` iterates :data:`openforge.suites.catalog.SUITES` and
names none of them: how a checkout is given (``KIND:PATH``) or recognised, which directories
and files are its tasks, whether it ships with OpenForge and which splits it adds all come
from here, and :func:`openforge.suites.metrics.suite_metrics` reports each suite's own
metrics for its tasks. A suite fills in only the ways it is found; the rest stay None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from openforge.tasks.model import Task, TaskError

__all__ = [
    "Checkout",
    "CheckoutLoader",
    "Metrics",
    "Scores",
    "Suite",
    "TaskDirs",
    "TaskFiles",
    "found_by",
    "holds",
]

# A checkout's root (or the path the user gave) -> the tasks that loaded and the errors of
# those that did not; TaskError when it is no such checkout at all.
CheckoutLoader = Callable[[Path], tuple[list[Task], list[TaskError]]]


@dataclass(frozen=True, slots=True)
class Checkout:
    """A published suite read from the user's own checkout as a whole."""

    load: CheckoutLoader
    # True for a directory that is this suite's checkout, given without ``KIND:``; None when
    # the suite is only ever named (``webvoyager:FILE``).
    recognise: Callable[[Path], bool] | None = None


@dataclass(frozen=True, slots=True)
class TaskDirs:
    """One task per directory, told by the files it holds."""

    claims: Callable[[Path], bool]
    load: Callable[[Path], Task]  # raises TaskError naming file and field


@dataclass(frozen=True, slots=True)
class TaskFiles:
    """One task per file, wherever such files lie under the path given."""

    glob: str  # a file name pattern, e.g. ``task_*.md``
    load: Callable[[Path, Path], Task]  # (file, the suite's root) -> the task


# Task id -> the rewards of its graded trials (infra_error trials left out).
Scores = Mapping[str, list[float]]


@dataclass(frozen=True, slots=True)
class Metrics:
    """A suite's own headline metrics, computed the way the suite computes them."""

    compute: Callable[[Scores, int], dict[str, float | int]]  # (scores, trials requested)
    by_split: bool = False  # reported per split too, besides overall and per category


@dataclass(frozen=True, slots=True)
class Suite:
    """Everything about one benchmark that loading and reporting need; the catalog lists them."""

    name: str  # KIND in ``--tasks KIND:PATH``, or a bundled suite's name
    formats: tuple[str, ...]  # Task.format of its tasks
    checkout: Checkout | None = None
    task_dirs: TaskDirs | None = None
    task_files: TaskFiles | None = None
    # Shipped with OpenForge: the suite's directory, generated into the cache on first use.
    bundled: Callable[[], Path] | None = None
    splits: tuple[str, ...] = ()  # its own splits, beside OpenForge's train and test
    metrics: Metrics | None = None  # reported by ``openforge eval`` for its tasks


def holds(*names: str) -> Callable[[Path], bool]:
    """A claim on the directories holding every one of the files ``names``."""
    return lambda d: all((d / name).is_file() for name in names)


def found_by(find: Callable[[Path], object]) -> Callable[[Path], bool]:
    """A recogniser from a suite's own ``find``, which raises TaskError on what is not one."""

    def recognise(root: Path) -> bool:
        try:
            find(root)
        except TaskError:
            return False
        return True

    return recognise
