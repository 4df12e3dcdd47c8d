"""Loaders: native and foreign formats, malformed tasks named precisely, escapes refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openforge.suites import load_tasks
from openforge.tasks import VERIFY_DIR, parse_verifier_output
from openforge.tasks.grading import VerifierError


def _native(root: Path, name: str, toml: str, verify: str = "print('{\"reward\": 1}')") -> Path:
    d = root / name
    (d / "workspace").mkdir(parents=True)
    (d / "verify").mkdir()
    (d / "task.toml").write_text(toml)
    (d / "workspace" / "in.txt").write_text("data\n")
    (d / "verify" / "verify.py").write_text(verify)
    return d


def test_native_task_loads_every_field(tmp_path: Path) -> None:
    _native(
        tmp_path,
        "t1",
        'id = "t1"\ninstruction = "do it"\ntimeout = 30\nsplit = "test"\n'
        'tags = ["easy"]\nnetwork = "none"\n[resources]\ncpu = 2\nmemory_mb = 256\n'
        "[verify]\ntimeout = 5\n",
    )
    ts = load_tasks(tmp_path)
    assert ts.errors == []
    (t,) = ts.tasks
    assert (t.id, t.instruction, t.timeout_s, t.split, t.tags) == (
        "t1",
        "do it",
        30,
        "test",
        ("easy",),
    )
    assert (t.network, t.cpu, t.memory_mb, t.verify_timeout_s) == ("none", 2.0, 256, 5.0)
    assert t.workspace_bytes() == {"in.txt": b"data\n"}
    assert set(t.verify_bytes()) == {f"{VERIFY_DIR}/verify.py", f"{VERIFY_DIR}/openforge_verify.py"}
    assert t.verify_command == f"python3 {VERIFY_DIR}/verify.py"
    assert load_tasks(tmp_path, split="train").tasks == []


def test_malformed_task_names_file_and_field_and_others_still_load(tmp_path: Path) -> None:
    _native(tmp_path, "good", 'id = "good"\ninstruction = "x"\n')
    bad = _native(tmp_path, "bad", 'id = "bad"\ninstruction = "x"\ntimeout = "soon"\n')
    _native(tmp_path, "broken", 'id = "broken\ninstruction = 1')
    _native(tmp_path, "net", 'id = "net"\ninstruction = "x"\nnetwork = "wifi"\n')
    ts = load_tasks(tmp_path)
    assert [t.id for t in ts.tasks] == ["good"]
    by_dir = {Path(e.file).parent.name: e for e in ts.errors}
    assert by_dir["bad"].file == str(bad / "task.toml")
    assert by_dir["bad"].field == "timeout" and "positive number" in by_dir["bad"].problem
    assert by_dir["broken"].field == "(toml)"
    assert by_dir["net"].field == "network" and "wifi" in str(by_dir["net"])


def test_duplicate_ids_are_errors(tmp_path: Path) -> None:
    _native(tmp_path, "a", 'id = "same"\ninstruction = "x"\n')
    _native(tmp_path, "b", 'id = "same"\ninstruction = "x"\n')
    ts = load_tasks(tmp_path)
    assert len(ts.tasks) == 1 and ts.errors[0].field == "id" and "duplicate" in ts.errors[0].problem


def test_symlink_out_of_task_dir_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    suite = tmp_path / "suite"
    d = _native(suite, "leaky", 'id = "leaky"\ninstruction = "x"\n')
    os.symlink(secret, d / "workspace" / "stolen.txt")
    ts = load_tasks(suite)
    assert ts.tasks == []
    assert ts.errors[0].field == "workspace/" and "outside" in ts.errors[0].problem


def test_qwenclawbench_paths_escaping_are_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("x")
    suite = tmp_path / "suite"
    suite.mkdir()
    body = (
        "\n## Prompt\n\nDo it.\n\n## Automated Checks\n\n```python\ndef grade(t, w):\n"
        "    return {'a': 1.0}\n```\n"
    )
    (suite / "task_01_abs.md").write_text(
        "---\nid: abs\nworkspace_files:\n  - source: /etc/passwd\n    dest: p\n---\n" + body
    )
    (suite / "task_02_dots.md").write_text(
        "---\nid: dots\nworkspace_files:\n  - source: ../outside.txt\n    dest: o\n---\n" + body
    )
    (suite / "task_03_ok.md").write_text("---\nid: ok\ntimeout_seconds: 60\n---\n" + body)
    ts = load_tasks(suite)
    assert [t.id for t in ts.tasks] == ["ok"]
    problems = sorted(e.problem for e in ts.errors)
    assert any("absolute path" in p for p in problems)
    assert any("escapes" in p for p in problems)
    assert all(e.field == "workspace_files[0].source" for e in ts.errors)


def test_harbor_terminal_bench_and_claweval_shapes(tmp_path: Path) -> None:
    h = tmp_path / "harbor-task"
    (h / "tests").mkdir(parents=True)
    (h / "solution").mkdir()
    (h / "task.toml").write_text(
        'version = "1.0"\n[metadata]\ntags = ["x"]\n'
        "[agent]\ntimeout_sec = 50.0\n[verifier]\ntimeout_sec = 20.0\n"
        "[environment]\ncpus = 1\nmemory_mb = 1024\n"
    )
    (h / "instruction.md").write_text("Make a file.\n")
    (h / "environment").mkdir()
    (h / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    (h / "tests" / "test.sh").write_text("test -f made.txt\n")
    (h / "solution" / "solve.sh").write_text("touch made.txt\n")
    tb = tmp_path / "tb-task"
    (tb / "tests").mkdir(parents=True)
    (tb / "task.yaml").write_text("instruction: Say hi.\nmax_agent_timeout_sec: 90\n")
    (tb / "run-tests.sh").write_text("test -f hi.txt\n")
    (tb / "Dockerfile").write_text("FROM debian:bookworm\n")
    ce = tmp_path / "ce-task"
    (ce / "workspace").mkdir(parents=True)
    (ce / "task.yaml").write_text("task_id: ce1\nprompt: Count.\ntimeout_seconds: 40\n")
    (ce / "grader.py").write_text("def grade(ws):\n    return 0.5\n")
    ts = load_tasks(tmp_path)
    assert ts.errors == []
    by = ts.by_id()
    assert by["harbor-task"].format == "harbor" and by["harbor-task"].timeout_s == 50.0
    assert by["harbor-task"].memory_mb == 1024 and "solve.sh" in by["harbor-task"].solution
    assert by["harbor-task"].workdir == "/app"
    assert by["tb-task"].format == "terminal-bench" and by["tb-task"].timeout_s == 90.0
    assert by["ce1"].format == "claweval" and by["ce1"].timeout_s == 40.0
    assert f"{VERIFY_DIR}/run.py" in by["ce1"].verify_bytes()


@pytest.mark.parametrize(
    "out",
    [b"", b"done\n", b'{"score": 1}', b'{"reward": 1.5}', b'{"reward": "1"}', b'{"reward": NaN}'],
)
def test_verifier_garbage_is_an_error(out: bytes) -> None:
    with pytest.raises(VerifierError):
        parse_verifier_output(out)


def test_verifier_last_line_wins() -> None:
    assert parse_verifier_output(b'noise\n{"reward": 0.25, "details": {"a": 1}}\n\n') == (
        0.25,
        {"a": 1},
    )


def test_claw_mini_is_bundled_and_split() -> None:
    ts = load_tasks("claw-mini")
    assert ts.errors == []
    assert len(ts.tasks) >= 40
    splits = [t.split for t in ts.tasks]
    assert splits.count("test") >= 10 and splits.count("train") >= 30
    assert all("solve.sh" in t.solution for t in ts.tasks)
    levels = {tag for t in ts.tasks for tag in t.tags if tag.startswith("level-")}
    assert levels == {"level-1", "level-2", "level-3", "level-4"}
