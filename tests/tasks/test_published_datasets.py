"""Against a real checkout of Terminal-Bench 1's datasets, when the user points at one:
``OPENFORGE_TERMINAL_BENCH_DATASETS`` (laude-institute/terminal-bench-datasets, or a fork with
its ``datasets/`` directory). Every task of the three datasets its registry published (Aider
Polyglot, DevEval, EvoEval) loads, as their own harness runs them; keys the loader does not
know are warnings, never refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.suites import load_tasks
from openforge.suites.loading import warning_lines

DATASETS = os.environ.get("OPENFORGE_TERMINAL_BENCH_DATASETS", "")
needs_datasets = pytest.mark.skipif(
    not DATASETS,
    reason="OPENFORGE_TERMINAL_BENCH_DATASETS does not point at a terminal-bench-datasets checkout",
)


@needs_datasets
@pytest.mark.parametrize("name", ["aider_polyglot", "deveval", "evoeval"])
def test_every_task_of_a_published_dataset_loads(name: str) -> None:
    root = Path(DATASETS) / "datasets" / name
    dirs = [d for d in root.iterdir() if (d / "task.yaml").is_file()]
    got = load_tasks(root)
    assert got.errors == [], got.errors[:3]
    assert len(got.tasks) == len(dirs) > 0
    assert {t.format for t in got.tasks} == {"terminal-bench"}
    lines = warning_lines(got.tasks)
    if name == "deveval":  # its task.yaml says language: and env_name:, unknown to TB1's model
        assert any(": language: unknown key, ignored (" in ln for ln in lines), lines
    print(name, len(got.tasks), "tasks;", lines)
