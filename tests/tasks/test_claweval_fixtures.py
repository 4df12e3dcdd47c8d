"""ClawEval's fixtures its GitHub repository leaves out (videos, documents): named once per run,
and read from a directory holding the benchmark's data release once one is given
(``--claweval-fixtures DIR`` or ``$OPENFORGE_CLAWEVAL_FIXTURES``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.suites import load_tasks
from openforge.suites.claweval.loader import FIXTURES_ENV
from openforge.suites.loading import error_lines
from openforge.tasks.model import MissingFile

from .claweval_sample import write_sample

OPENFORGE = Path(sys.executable).parent / "openforge"


def _video_tasks(root: Path) -> Path:
    """Two tasks of the sample checkout that name videos the checkout lacks, as published."""
    write_sample(root)
    for tid in ("M001_video", "M002_video"):
        d = root / "tasks" / tid
        (d / "fixtures").mkdir(parents=True)
        (d / "grader.py").write_text((root / "tasks/T001_notes/grader.py").read_text())
        (d / "fixtures" / "frames.txt").write_text("3 frames\n")
        (d / "task.yaml").write_text(
            f"task_id: {tid}\ntask_name: Video {tid}\ncategory: video\ntags: [multimodal]\n"
            "prompt:\n  text: Describe the video.\n  language: en\n"
            "sandbox_files:\n  - fixtures/frames.txt\n  - fixtures/video.mp4\n"
            "sandbox_grader_files:\n  - fixtures/gt_1.png\n"
        )
    return root


def test_missing_fixtures_are_named_once_for_every_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FIXTURES_ENV, raising=False)
    root = _video_tasks(tmp_path / "claw-eval")
    got = load_tasks(f"claweval:{root}")
    assert "T001_notes" in got.by_id() and "M001_video" not in got.by_id()
    missing = [e for e in got.errors if isinstance(e, MissingFile)]
    assert len(missing) == 2
    assert missing[0].field == "sandbox_files[1]" and missing[0].file.endswith("task.yaml")
    assert missing[0].missing == ("fixtures/video.mp4", "fixtures/gt_1.png")
    (line,) = [ln for ln in error_lines(got.errors) if "missing" in ln]
    assert line.startswith("skipping 2 task(s) whose files are missing: ")
    assert "fixtures/video.mp4 (2 tasks), fixtures/gt_1.png (2 tasks)" in line
    assert "--claweval-fixtures DIR" in line and FIXTURES_ENV in line


@pytest.mark.parametrize(
    "layout", ["tasks/{tid}/fixtures/{name}", "{tid}/fixtures/{name}", "fixtures/{tid}/{name}"]
)
def test_tasks_needing_fixtures_load_from_the_release_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    root = _video_tasks(tmp_path / "claw-eval")
    release = tmp_path / "release"
    for tid in ("M001_video", "M002_video"):
        for name in ("video.mp4", "gt_1.png"):
            f = release / layout.format(tid=tid, name=name)
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(f"{tid} {name}".encode())
    monkeypatch.setenv(FIXTURES_ENV, str(release))
    got = load_tasks(f"claweval:{root}")
    task = got.by_id()["M002_video"]
    assert not [e for e in got.errors if "M00" in e.file]
    assert task.workspace_bytes()["fixtures/video.mp4"] == b"M002_video video.mp4"
    assert task.workspace["fixtures/frames.txt"] == root / "tasks/M002_video/fixtures/frames.txt"
    assert "fixtures/gt_1.png" not in task.workspace  # a grader-only file stays out


def test_the_cli_option_gives_the_directory(tmp_path: Path) -> None:
    root = _video_tasks(tmp_path / "claw-eval")
    release = tmp_path / "release"
    for name in ("video.mp4", "gt_1.png"):
        (release / "M001_video" / "fixtures").mkdir(parents=True, exist_ok=True)
        (release / "M001_video" / "fixtures" / name).write_bytes(b"x")
    env = {k: v for k, v in os.environ.items() if k != FIXTURES_ENV}
    base = [str(OPENFORGE), "images", "build", "--tasks", f"claweval:{root}", "--task", "M001_*"]
    out = subprocess.run(base, capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 2, out.stderr  # not loaded: nothing matches --task
    assert out.stderr.count("whose files are missing") == 1 and "'--task'" in out.stderr
    out = subprocess.run(
        [*base, "--claweval-fixtures", str(release)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr  # loaded and selected; it has no image to build
    assert "whose files are missing" not in out.stderr
