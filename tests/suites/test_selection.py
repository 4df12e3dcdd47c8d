"""Task selection (``--task/--exclude/--limit/--sample/--seed``): one function for every command
and the training config; a selection that keeps nothing names its option; one task of any
suite layout loads alone with its suite's assets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.tasks.claweval_sample import write_sample as write_claweval
from tests.tasks.qcb_sample import write_sample as write_qcb

from openforge.suites import load_tasks
from openforge.suites.selection import SelectionError, TaskSelection, select_tasks
from openforge.training.config import ConfigError, load_config
from openforge.training.session import _load_split

OPENFORGE = Path(sys.executable).parent / "openforge"


def _ids(sel: TaskSelection) -> list[str]:
    return [t.id for t in select_tasks(load_tasks("claw-mini").tasks, sel)]


def test_ids_globs_exclusions_limits_and_samples() -> None:
    every = [t.id for t in load_tasks("claw-mini").tasks]
    assert _ids(TaskSelection()) == every
    assert _ids(TaskSelection(include=("hello-file",))) == ["hello-file"]
    json_tasks = [i for i in every if i.startswith("json-")]
    assert len(json_tasks) >= 2
    assert _ids(TaskSelection(include=("json-*",))) == json_tasks
    assert _ids(TaskSelection(include=("json-*",), exclude=(json_tasks[0],))) == json_tasks[1:]
    assert _ids(TaskSelection(limit=3)) == every[:3]
    sampled = _ids(TaskSelection(sample=5, seed=7))
    assert len(sampled) == 5 and sampled == _ids(TaskSelection(sample=5, seed=7))
    assert sampled == [i for i in every if i in sampled]  # suite order kept
    assert sampled != _ids(TaskSelection(sample=5, seed=8))
    assert _ids(TaskSelection(sample=500)) == every
    assert _ids(TaskSelection(sample=5, seed=7, limit=2)) == sampled[:2]


def test_a_selection_that_keeps_nothing_names_its_option() -> None:
    tasks = load_tasks("claw-mini").tasks
    with pytest.raises(SelectionError) as err:
        select_tasks(tasks, TaskSelection(include=("hello-fil",)))
    assert err.value.option == "--task" and "'hello-file'" in err.value.problem
    with pytest.raises(SelectionError) as err:
        select_tasks(tasks, TaskSelection(include=("zzz-*",)))
    assert "no task id matches 'zzz-*'" in err.value.problem
    with pytest.raises(SelectionError) as err:
        select_tasks(tasks, TaskSelection(exclude=("*",)))
    assert err.value.option == "--exclude"
    with pytest.raises(SelectionError) as err:
        select_tasks(tasks, TaskSelection(limit=0), {"limit": "task_limit"})
    assert err.value.option == "task_limit"


def test_one_qwenclawbench_task_file_loads_with_its_suites_assets(tmp_path: Path) -> None:
    root = write_qcb(tmp_path / "qcb")
    file = root / "data/sample-v1/tasks/task_00001_answer.md"
    got = load_tasks(file)
    assert got.errors == []
    (task,) = got.tasks
    assert task.id == "task_00001_answer" and task.format == "qwenclawbench"
    assert task.grader is not None  # graded by the checkout's own lib_grading
    assert (
        task.workspace["notes/input.txt"]
        == root / "data/sample-v1/assets/task_00001_answer/input.txt"
    )


def test_one_claweval_task_directory_or_file_loads_alone(tmp_path: Path) -> None:
    root = write_claweval(tmp_path / "claw-eval")
    for given in (root / "tasks/T001_notes", root / "tasks/T001_notes/task.yaml"):
        got = load_tasks(given)
        assert [t.id for t in got.tasks] == ["T001_notes"], got.errors
        assert got.tasks[0].grader is not None and got.tasks[0].mcp is not None


def test_one_osworld_example_loads_alone(tmp_path: Path) -> None:
    osw = tmp_path / "evaluation_examples"
    (osw / "examples" / "os").mkdir(parents=True)
    (osw / "test_all.json").write_text('{"os": ["a", "b"]}')
    for ident in ("a", "b"):
        example = {
            "id": ident, "instruction": "Make a file.", "config": [],
            "evaluator": {"func": "exact_match",
                          "result": {"type": "vm_command_line", "command": "cat /tmp/x"},
                          "expected": {"type": "rule", "rules": {"expected": "1"}}},
        }  # fmt: skip
        (osw / "examples" / "os" / f"{ident}.json").write_text(json.dumps(example))
    assert [t.id for t in load_tasks(osw).tasks] == ["osworld/os/a", "osworld/os/b"]
    assert [t.id for t in load_tasks(osw / "examples/os/b.json").tasks] == ["osworld/os/b"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(OPENFORGE), *args], capture_output=True, text=True, check=False,
        env={**os.environ, "COLUMNS": "300"}, timeout=600,
    )  # fmt: skip


def test_tasks_check_runs_only_the_selected_task() -> None:
    out = _cli("tasks", "check", "--tasks", "claw-mini", "--task", "hello-file",
               "--backend", "local", "--no-cache")  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [ln for ln in out.stdout.splitlines() if "│" in ln and " ok" in ln]
    assert len(rows) == 1 and "hello-file" in rows[0], out.stdout


@pytest.mark.parametrize(
    ("command", "option", "args"),
    [
        (("tasks", "check"), "--task", ("--task", "hello-fil")),
        (("images", "build"), "--task", ("--task", "nope-*")),
        (("rollout",), "--exclude", ("--exclude", "*", "--harness", "shell", "--gateway",
                                     "http://127.0.0.1:9", "--out", "run")),
        (("eval",), "--task", ("--task", "x", "--harness", "shell", "--gateway",
                               "http://127.0.0.1:9", "--out", "run")),
    ],
)  # fmt: skip
def test_every_command_names_the_option_that_selected_nothing(
    command: tuple[str, ...], option: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    out = _cli(*command, "--tasks", "claw-mini", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"'{option}'" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "run").exists()


def test_training_config_selects_with_the_same_function(tmp_path: Path) -> None:
    cfg = load_config(None, tasks="claw-mini", task_ids=["json-*", "hello-file"],
                      exclude_tasks=["json-get*"])  # fmt: skip
    train = [t.id for t in _load_split(cfg, "train", "train_split")]
    held = [t.id for t in _load_split(cfg, "test", "eval_split")]
    chosen = sorted(train + held)
    every = load_tasks("claw-mini").tasks
    want = sorted(
        t.id for t in every
        if (t.id.startswith("json-") and not t.id.startswith("json-get")) or t.id == "hello-file"
    )  # fmt: skip
    assert chosen == want and "hello-file" in train
    with pytest.raises(ConfigError) as err:
        _load_split(load_config(None, task_ids=["nope"]), "train", "train_split")
    assert err.value.key == "task_ids" and "nope" in str(err.value)
