"""Foreign formats load as published: a key their loader does not know is a warning naming the
file and key (once per suite in the CLI), a known key with a bad value is still an error, and
OpenForge's own task.toml stays strict. Sample files are written here in each published layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from openforge.suites import load_tasks
from openforge.suites.loading import warning_lines

from .claweval_sample import write_sample as write_claweval
from .qcb_sample import write_sample as write_qcb

OPENFORGE = Path(sys.executable).parent / "openforge"

# Terminal-Bench 1's deveval tasks carry keys its Task model does not define.
DEVEVAL_YAML = """instruction: |-
  Implement the area calculation described in the README.
author_name: DevEval
author_email: unknown
difficulty: medium
category: software-engineering
tags: [cpp]
parser_name: pytest
max_agent_timeout_sec: 900.0
max_test_timeout_sec: 180.0
run_tests_in_same_shell: false
language: cpp
env_name: cpp
"""


def _terminal_bench(root: Path, name: str, yaml_text: str) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(yaml_text)
    (d / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (d / "run-tests.sh").write_text("bash $TEST_DIR/run.sh\n")
    (d / "tests" / "test_outputs.py").write_text("def test_x():\n    assert True\n")
    (d / "solution.sh").write_text("true\n")
    return d


def _harbor(root: Path, toml: str) -> Path:
    d = root / "h"
    (d / "tests").mkdir(parents=True)
    (d / "environment").mkdir()
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    (d / "instruction.md").write_text("x\n")
    (d / "tests" / "test.sh").write_text("true\n")
    (d / "task.toml").write_text(toml)
    return d


def test_terminal_bench_deveval_keys_are_warnings_and_bad_values_errors(tmp_path: Path) -> None:
    for name in ("cpp-area-1", "cpp-area-2"):
        _terminal_bench(tmp_path / "deveval", name, DEVEVAL_YAML)
    got = load_tasks(tmp_path / "deveval")
    assert got.errors == [] and [t.id for t in got.tasks] == ["cpp-area-1", "cpp-area-2"]
    (first, second) = got.tasks[0].warnings
    assert (first.key, second.key) == ("language", "env_name")
    assert first.file == str(tmp_path / "deveval" / "cpp-area-1" / "task.yaml")
    assert "unknown key, ignored" in first.problem
    assert len(got.warnings) == 4
    lines = warning_lines(got.tasks)
    assert lines[0].startswith("terminal-bench: task.yaml: language: unknown key, ignored (2 tasks")
    assert len(lines) == 2
    bad = DEVEVAL_YAML.replace("max_agent_timeout_sec: 900.0", "max_agent_timeout_sec: soon")
    _terminal_bench(tmp_path / "bad", "t", bad)
    (err,) = load_tasks(tmp_path / "bad").errors
    assert err.file.endswith("t/task.yaml") and err.field == "max_agent_timeout_sec"


def test_harbor_unknown_keys_warn_with_the_closest_known_one(tmp_path: Path) -> None:
    d = _harbor(tmp_path, "[verifier]\ntimout_sec = 5\n[enviroment]\ncpus = 1\n")
    got = load_tasks(d)
    assert got.errors == []
    by_key = {w.key: w.problem for w in got.tasks[0].warnings}
    assert "'verifier.timeout_sec'" in by_key["verifier.timout_sec"]
    assert "'environment'" in by_key["enviroment"]
    (d / "task.toml").write_text("[environment]\ncpus = 'many'\n")
    (err,) = load_tasks(d).errors
    assert err.file == str(d / "task.toml") and err.field == "environment.cpus"


def test_native_task_toml_stays_strict(tmp_path: Path) -> None:
    d = tmp_path / "n"
    (d / "verify").mkdir(parents=True)
    (d / "verify" / "verify.py").write_text("print('{\"reward\": 1}')\n")
    (d / "task.toml").write_text('id = "n"\ninstruction = "x"\nlanguage = "cpp"\n')
    got = load_tasks(d)
    assert got.tasks == []
    (err,) = got.errors
    assert err.field == "language" and "unknown key" in err.problem


def test_claweval_and_qwenclawbench_checkouts_warn_on_unknown_keys(tmp_path: Path) -> None:
    claw = write_claweval(tmp_path / "claw-eval")
    yaml_file = claw / "tasks" / "T001_notes" / "task.yaml"
    text = yaml_file.read_text().replace("max_turns: 10\n", "max_turns: 10\n  sandbox_tools: [x]\n")
    yaml_file.write_text(text + "rating: 5\n")
    got = load_tasks(f"claweval:{claw}")
    t001 = got.by_id()["T001_notes"]
    assert {w.key for w in t001.warnings} == {"environment.sandbox_tools", "rating"}
    assert all(w.file == str(yaml_file) for w in t001.warnings)
    assert all(not t.warnings for t in got.tasks if t.id != "T001_notes")
    yaml_file.write_text(yaml_file.read_text().replace("max_turns: 10", "max_turns: lots"))
    err = next(e for e in load_tasks(f"claweval:{claw}").errors if "T001" in e.file)
    assert err.field == "environment.max_turns"

    qcb = write_qcb(tmp_path / "qcb")
    md = qcb / "data/sample-v1/tasks/task_00001_answer.md"
    md.write_text(md.read_text().replace("---\n", "---\nlicense: mit\n", 1))
    got = load_tasks(f"qwenclawbench:{qcb}")
    (w,) = got.by_id()["task_00001_answer"].warnings
    assert (w.file, w.key) == (str(md), "license")
    md.write_text(md.read_text().replace("timeout_seconds: 120", "timeout_seconds: -4"))
    err = next(e for e in load_tasks(f"qwenclawbench:{qcb}").errors if "00001" in e.file)
    assert err.field == "timeout_seconds"


def test_gui_formats_warn_on_unknown_keys(tmp_path: Path) -> None:
    mw = tmp_path / "mw" / "click"
    mw.mkdir(parents=True)
    (mw / "miniwob.toml").write_text('task = "click-button"\nseed = 3\ncolour = "red"\n')
    (task,) = load_tasks(mw).tasks
    assert [(w.key, w.file) for w in task.warnings] == [("colour", str(mw / "miniwob.toml"))]
    (mw / "miniwob.toml").write_text('task = "click-button"\nseed = "three"\n')
    assert load_tasks(mw).errors[0].field == "seed"

    wv = tmp_path / "WebVoyager_data.jsonl"
    row = {"web_name": "Allrecipes", "id": "Allrecipes--0", "ques": "q", "web": "https://a.example"}
    wv.write_text(json.dumps({**row, "answer": "x"}) + "\n" + json.dumps(row | {"id": "A--1"}))
    got = load_tasks(f"webvoyager:{wv}")
    assert [[w.key for w in t.warnings] for t in got.tasks] == [["line 1.answer"], []]

    m2w = tmp_path / "Online_Mind2Web.json"
    rows = [{"task_id": "a", "confirmed_task": "c", "website": "https://b.example", "x": 1}]
    m2w.write_text(json.dumps(rows))
    (task,) = load_tasks(f"online-mind2web:{m2w}").tasks
    assert [w.key for w in task.warnings] == ["[0].x"]

    osw = tmp_path / "evaluation_examples"
    (osw / "examples" / "os").mkdir(parents=True)
    (osw / "test_all.json").write_text('{"os": ["abc"]}')
    example = {
        "id": "abc", "snapshot": "os", "instruction": "Make a file.", "source": "", "config": [],
        "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command":
                      "cat /tmp/x"}, "expected": {"type": "rule", "rules": {"expected": "1"}},
                      "weight": 2},
        "new_field": True,
    }  # fmt: skip
    (osw / "examples" / "os" / "abc.json").write_text(json.dumps(example))
    (task,) = load_tasks(osw).tasks
    assert sorted(w.key for w in task.warnings) == ["evaluator.weight", "new_field"]


def test_tasks_check_shows_each_warning_once_per_suite(tmp_path: Path) -> None:
    for name in ("cpp-area-1", "cpp-area-2", "cpp-area-3"):
        _terminal_bench(tmp_path / "deveval", name, DEVEVAL_YAML)
    out = subprocess.run(
        [str(OPENFORGE), "tasks", "check", "--tasks", str(tmp_path / "deveval"),
         "--backend", "local", "--no-cache"],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr  # no task image on local: quarantined
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("warning: ")]
    assert len(lines) == 2, out.stdout
    assert "task.yaml: language: unknown key, ignored (3 tasks, e.g. " in lines[0]
    assert "env_name" in lines[1]
    # Progress, as lines (not a terminal): the last when the last task is checked.
    assert "tasks 3/3, pass rate 0% (0/3)" in out.stderr and "quarantined 3" in out.stderr
