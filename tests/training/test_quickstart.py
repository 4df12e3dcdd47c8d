"""The quickstart's task selection: what the warm-up teaches, what GRPO trains, what is held out."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli import app
from openforge.engines.vllm_launch import VLLMProcess, VLLMStartError
from openforge.suites import load_tasks
from openforge.suites.drills.generate import DRILL_FAMILIES
from openforge.training.quickstart import QUICKSTART_SUITE, quickstart_config, teacher_tasks


def test_quickstart_holds_out_the_test_instances_and_teaches_a_few_per_family() -> None:
    cfg = quickstart_config("runs/unused", steps=1)
    train = load_tasks(cfg.tasks, split=cfg.train_split).tasks
    held_out = load_tasks(cfg.tasks, split=cfg.eval_split).tasks
    assert cfg.tasks == QUICKSTART_SUITE and not cfg.task_ids
    assert held_out and {t.id for t in train}.isdisjoint(t.id for t in held_out)
    taught = teacher_tasks(train)
    families = sorted({t.id.removeprefix("drill-").rsplit("-", 2)[0] for t in taught})
    assert families == sorted(DRILL_FAMILIES)
    assert len(taught) == 2 * len(DRILL_FAMILIES) < len(train)
    assert all(t.split == "train" for t in taught)
    assert len(teacher_tasks(train, per_family=1)) == len(DRILL_FAMILIES)


def test_quickstart_on_vllm_says_what_it_needs_without_a_stack_trace(tmp_path: Path) -> None:
    runner = CliRunner()
    run = ["quickstart", "--engine", "vllm", "--run-dir", str(tmp_path / "run")]
    missing = runner.invoke(app, run, env={"OPENFORGE_VLLM_PYTHON": ""})
    assert missing.exit_code != 0 and "Traceback" not in missing.output
    assert "--engine-url URL" in missing.output and "--vllm-python" in missing.output
    both = runner.invoke(
        app, [*run, "--engine-url", "http://127.0.0.1:9", "--vllm-python", sys.executable]
    )
    assert both.exit_code != 0 and "not both" in both.output
    nowhere = runner.invoke(app, [*run, "--vllm-python", str(tmp_path / "no-python")])
    assert nowhere.exit_code != 0 and "no Python interpreter at" in nowhere.output


@pytest.mark.parametrize("relative", [False, True])
def test_a_python_without_vllm_is_reported_with_the_servers_own_words(
    tmp_path: Path, relative: bool
) -> None:
    # This interpreter has no vLLM: the server exits at once, and the error carries its log.
    # A relative path is the caller's (the server starts in its own directory).
    python = os.path.relpath(sys.executable) if relative else sys.executable
    with pytest.raises(VLLMStartError, match="exited with 1") as err:
        VLLMProcess.start(python, tmp_path / "model", tmp_path / "vllm", timeout_s=60)
    assert "No module named" in str(err.value)
    assert (tmp_path / "vllm" / "vllm.log").is_file()
