"""Task files say what is wrong: misspelled keys, a directory that is not a task, brackets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.suites import load_tasks

OPENFORGE = Path(sys.executable).parent / "openforge"  # the venv's, in any worktree


def _native(root: Path, toml: str) -> Path:
    (root / "verify").mkdir(parents=True)
    (root / "verify" / "verify.py").write_text("print('{\"reward\": 1}')\n")
    (root / "task.toml").write_text(toml)
    return root


@pytest.mark.parametrize(
    ("toml", "field", "hint"),
    [
        ('id = "t"\ninstruction = "x"\ntimout = 5\n', "timout", "'timeout'"),
        ('id = "t"\ninstruction = "x"\nsplt = "test"\n', "splt", "'split'"),
        ('id = "t"\ninstruction = "x"\n[verfy]\ntimeout = 5\n', "verfy", "'verify'"),
        (
            'id = "t"\ninstruction = "x"\n[verify]\ntimout = 5\n',
            "verify.timout",
            "'verify.timeout'",
        ),
        ('id = "t"\ninstruction = "x"\n[resources]\nmemory = 5\n', "resources.memory", "memory_mb"),
        (
            'id = "t"\ninstruction = "x"\n[[tools]]\nname = "a"\ndescription = "b"\nusge = "c"\n',
            "tools[0].usge",
            "'tools[0].usage'",
        ),
    ],
)
def test_unknown_native_key_names_the_closest_known_one(
    tmp_path: Path, toml: str, field: str, hint: str
) -> None:
    ts = load_tasks(_native(tmp_path / "t", toml))
    assert ts.tasks == []
    (err,) = ts.errors
    assert err.field == field
    assert "unknown key" in err.problem and hint in err.problem


def test_unknown_harbor_key_is_a_warning_naming_the_closest_known_one(tmp_path: Path) -> None:
    d = tmp_path / "h"
    (d / "tests").mkdir(parents=True)
    (d / "environment").mkdir()
    (d / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    (d / "instruction.md").write_text("x\n")
    (d / "tests" / "test.sh").write_text("true\n")
    (d / "task.toml").write_text("[verifier]\ntimout_sec = 5\n")
    got = load_tasks(d)
    assert got.errors == []
    (w,) = got.warnings
    assert w.key == "verifier.timout_sec" and "'verifier.timeout_sec'" in w.problem
    (d / "task.toml").write_text("[enviroment]\ncpus = 1\n")
    (w,) = load_tasks(d).warnings
    assert w.key == "enviroment" and "'environment'" in w.problem


def test_harbor_dir_without_instruction_says_which_file_it_lacks(tmp_path: Path) -> None:
    d = tmp_path / "h"
    (d / "tests").mkdir(parents=True)
    (d / "tests" / "test.sh").write_text("true\n")
    (d / "task.toml").write_text("[agent]\ntimeout_sec = 5.0\n")
    (err,) = load_tasks(d).errors
    assert err.field == "instruction.md" and "missing" in err.problem
    assert "None" not in str(err)
    (d / "instruction.md").write_text("x\n")
    (d / "tests" / "test.sh").unlink()
    (err,) = load_tasks(d).errors
    assert err.field == "tests/test.sh" and "missing" in err.problem


def test_cli_prints_brackets_in_task_errors(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "t").mkdir(parents=True)
    (suite / "t" / "task.toml").write_text('id = "t"\ninstruction = "x"\n')
    out = subprocess.run(
        [str(OPENFORGE), "rollout", "--tasks", str(suite), "--harness", "shell",
         "--gateway", "http://127.0.0.1:9", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert out.returncode == 2
    assert "(or [verify] command in task.toml)" in out.stderr
