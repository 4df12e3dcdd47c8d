"""A training run stopped part way resumes from its last checkpoint and skips what it
finished: the held-out evaluation before training, the SFT updates checkpointed, the
teacher (the `tiny` model through a real gateway, orchestrator and local sandboxes)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from openforge.models.registry import resolve_model
from openforge.training.config import TrainConfig
from openforge.training.loop import checkpoint_extra, run_loop
from openforge.training.session import open_session
from openforge.training.teacher import SftSample, sft_warmup, teacher_samples

from .test_loop_e2e import AGENT, _suite

pytestmark = pytest.mark.slow


class _Stopped(Exception):
    """Stands for the Ctrl-C that stops the first run part way through SFT."""


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


async def test_stopped_in_sft_resumes_at_the_next_update_and_skips_the_evaluation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from openforge.engines.local import LocalEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    model = resolve_model("tiny")
    run_dir = tmp_path / "run"
    cfg = TrainConfig(
        model=str(model), steps=1, tasks_per_step=1, group_size=2, sft_epochs=2,
        tasks=str(_suite(tmp_path / "suite")), harness="shell",
        rollout_options={"harness_options": {"command": AGENT}}, concurrency=2,
        run_dir=str(run_dir), eval_samples=1,
    )  # fmt: skip
    # Two samples, one update per epoch: two updates, a checkpoint between them.
    samples = [SftSample(f"r{i}", [1, 2, 3 + i], [4, 5, 6], [1, 1, 1], [0.0] * 3) for i in range(2)]
    store_path = tmp_path / "store.db"
    gateway = Gateway(LocalEngine(str(model), threads=1), SqliteStore(store_path), model=model)
    sft_calls: list[int] = []
    async with gateway as gw:
        cfg = dataclasses.replace(cfg, admin_token=gw.admin_token)
        async with open_session(cfg, gw.control_url, store_path) as env:
            real = env.trainer.sft_step

            def stop_at_the_second(*args: Any, **kwargs: Any) -> Any:
                sft_calls.append(1)
                if len(sft_calls) == 2:
                    raise _Stopped
                return real(*args, **kwargs)

            env.trainer.sft_step = stop_at_the_second  # type: ignore[method-assign]
            with pytest.raises(_Stopped):
                await run_loop(cfg, env, warmup=sft_warmup(samples))
        extra = checkpoint_extra(run_dir)
        assert extra is not None and extra["sft_updates"] == 1 and not extra["warmed_up"]
        assert [r["tag"] for r in _records(run_dir) if r["kind"] == "eval"] == ["before"]

        caplog.set_level(logging.INFO, logger="openforge.training")
        sft_calls.clear()
        async with open_session(cfg, gw.control_url, store_path) as env:
            real = env.trainer.sft_step

            def count(*args: Any, **kwargs: Any) -> Any:
                sft_calls.append(1)
                return real(*args, **kwargs)

            env.trainer.sft_step = count  # type: ignore[method-assign]
            summary = await run_loop(cfg, env, warmup=sft_warmup(samples))
    assert len(sft_calls) == 1  # only the update the checkpoint did not hold
    assert summary.steps_done == 1
    text = caplog.text
    assert "resuming" in text and "teacher, SFT updates 1-1, evaluation before" in text
    assert "sft: resuming at update 2/2" in text
    assert "eval before: done before" in text
    tags = [r["tag"] for r in _records(run_dir) if r["kind"] == "eval"]
    assert tags == ["before", "after"]  # the evaluation before training ran once
    last = checkpoint_extra(run_dir)
    assert last is not None and last["warmed_up"] and last["next_step"] == 1


async def test_a_finished_teacher_is_not_played_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The teacher's SFT samples are read back from its run directory once it finished."""
    teacher = tmp_path / "run" / "teacher"
    teacher.mkdir(parents=True)
    line = {"rollout_id": "r1", "input_ids": [1, 2, 3], "loss_mask": [0, 0, 1]}
    (teacher / "sft.tokens.jsonl").write_text(json.dumps(line) + "\n")
    (teacher / "done.json").write_text('{"samples": 1, "rollouts": 1}')
    cfg = TrainConfig(run_dir=str(tmp_path / "run"), sft_epochs=1)
    caplog.set_level(logging.INFO, logger="openforge.training")

    async def no_scripts(task: Any) -> dict[str, list[dict[str, Any]]]:
        raise AssertionError("the teacher was played again")

    samples = await teacher_samples(cfg, [], resolve_model("tiny"), no_scripts)
    assert [s.rollout_id for s in samples] == ["r1"]
    assert "teacher: recorded before (1 SFT samples" in caplog.text


def test_ctrl_c_says_how_to_resume(tmp_path: Path) -> None:
    """``openforge train`` stopped by Ctrl-C (here during its first evaluation) exits 130
    and prints the command that resumes it."""
    import os
    import signal
    import subprocess
    import sys

    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        f"model: {resolve_model('tiny')}\nsteps: 1\ntasks_per_step: 1\ngroup_size: 2\n"
        f"tasks: {_suite(tmp_path / 'suite')}\nharness: shell\nconcurrency: 1\n"
        f"run_dir: {tmp_path / 'run'}\n"
        "rollout_options: {harness_options: {command: 'sleep 600'}}\n"
    )
    openforge = Path(sys.executable).with_name("openforge")
    with subprocess.Popen(
        [str(openforge), "train", str(cfg)], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "300"},
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # wait until the evaluation's rollouts have started
            seen.append(line)
            if "eval before:" in line:
                break
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert code == 130, "".join(seen) + rest
    assert f"interrupted: rerun `openforge train {cfg}` to resume from the start" in rest, rest


async def test_the_kl_reference_is_the_warmed_up_policy_and_its_checkpoints_keep_it(
    tmp_path: Path,
) -> None:
    """With a KL, GRPO's first step measures no drift from the policy the SFT warm-up left
    (the base model would show the warm-up's own), and the checkpoint keeps that reference."""
    from openforge.engines.local import LocalEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    model = resolve_model("tiny")
    run_dir = tmp_path / "run"
    cfg = TrainConfig(
        model=str(model), steps=1, tasks_per_step=1, group_size=2, sft_epochs=2,
        sft_learning_rate=1e-2, kl_coef=0.05, tasks=str(_suite(tmp_path / "suite")),
        harness="shell", rollout_options={"harness_options": {"command": AGENT}},
        concurrency=2, run_dir=str(run_dir), eval_samples=1,
    )  # fmt: skip
    samples = [SftSample(f"r{i}", [1, 2, 3 + i], [4, 5, 6], [1, 1, 1], [0.0] * 3) for i in range(2)]
    store_path = tmp_path / "store.db"
    gateway = Gateway(LocalEngine(str(model), threads=1), SqliteStore(store_path), model=model)
    async with gateway as gw:
        cfg = dataclasses.replace(cfg, admin_token=gw.admin_token)
        async with open_session(cfg, gw.control_url, store_path) as env:
            await run_loop(cfg, env, evaluate_edges=False, warmup=sft_warmup(samples))
    assert [r["kind"] for r in _records(run_dir)].count("sft") == 2  # the policy moved
    (step,) = [r for r in _records(run_dir) if r["kind"] == "train"]
    assert step["kl"] == pytest.approx(0.0, abs=1e-6)
    assert (run_dir / "checkpoints" / "step-000001" / "reference.safetensors").is_file()
