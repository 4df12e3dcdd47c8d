"""The SFT warm-up: reference solutions played through a real gateway by the scripted engine
as claw tool calls, exported as SFT records, merged into paths, and trained on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import torch

from openforge.models.registry import resolve_model
from openforge.suites import load_tasks
from openforge.tasks.model import Task
from openforge.training.config import TrainConfig
from openforge.training.teacher import (
    SftSample,
    export_teacher_sft,
    load_sft_samples,
    record_teacher,
    sft_batches,
    solution_command,
    solution_files,
    teacher_script,
    teacher_scripts,
)
from openforge.training.trainer import Trainer


def _task(task_id: str) -> Task:
    (task,) = [t for t in load_tasks("claw-mini").tasks if t.id == task_id]
    return task


def test_solution_command_and_script() -> None:
    assert solution_command(_task("nested-dirs")) == (
        "mkdir -p a/b/c && echo leaf > a/b/c/leaf.txt"
    )
    # a multi-line python3 -c '…' block stays one command
    avg = solution_command(_task("csv-average"))
    assert avg is not None and avg.startswith("python3 -c '") and "\n" in avg
    script = teacher_script(_task("copy-file"))
    assert script == [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "cp notes.txt backup.txt"}}]},
        {"tool_calls": [{"name": "submit", "arguments": {}}]},
    ]


async def test_write_variant_only_for_content_the_instruction_gives() -> None:
    assert await solution_files(_task("two-lines")) == {"lines.txt": "alpha\nbeta\n"}
    assert await solution_files(_task("count-lines")) is None  # a computed answer
    assert await solution_files(_task("delete-file")) is None  # deletes a file
    variants = await teacher_scripts(_task("two-lines"))
    assert sorted(variants) == ["bash", "write"]
    assert variants["write"][0] == {
        "tool_calls": [
            {"name": "write", "arguments": {"path": "lines.txt", "content": "alpha\nbeta\n"}}
        ]
    }


def test_load_sft_samples_merges_calls_that_extend_each_other(tmp_path: Path) -> None:
    recs = [
        {"rollout_id": "r1", "input_ids": [1, 2, 3, 10, 11], "loss_mask": [0, 0, 0, 1, 1]},
        {"rollout_id": "r1", "input_ids": [1, 2, 3, 10, 11, 5, 6, 12],
         "loss_mask": [0, 0, 0, 0, 0, 0, 0, 1]},
        {"rollout_id": "r2", "input_ids": [1, 2, 20], "loss_mask": [0, 0, 1]},
        {"rollout_id": "r2", "input_ids": [9, 9, 21], "loss_mask": [0, 0, 1]},  # a fork
    ]  # fmt: skip
    f = tmp_path / "x.tokens.jsonl"
    f.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    got = [(s.rollout_id, s.prompt_ids, s.response_ids, s.loss_mask) for s in load_sft_samples(f)]
    assert got == [
        ("r1", [1, 2, 3], [10, 11, 5, 6, 12], [1, 1, 0, 0, 1]),
        ("r2", [1, 2], [20], [1]),
        ("r2", [9, 9], [21], [1]),
    ]
    batches = sft_batches([SftSample("a", [1], [2], [1])] * 5, epochs=2, batch=2, seed=0)
    assert [len(b) for b in batches] == [2, 2, 1, 2, 2, 1]


@pytest.mark.slow
async def test_teacher_trajectories_through_the_gateway_train_by_sft(tmp_path: Path) -> None:
    model = resolve_model("smollm2-135m")  # the scripted engine needs only its tokenizer
    tasks = [_task("copy-file"), _task("two-lines")]
    results = await record_teacher(tasks, model, tmp_path, {"max_turns": 3, "max_tokens": 96})
    # copy-file: bash; two-lines: bash and write (its content is spelled out)
    assert [(r.task_id, r.status, r.reward) for r in results] == [
        ("copy-file", "completed", 1.0), ("two-lines", "completed", 1.0),
        ("two-lines", "completed", 1.0),
    ]  # fmt: skip
    tokens = await export_teacher_sft(tmp_path / "teacher.db", tmp_path / "sft.jsonl")
    assert tokens is not None and (tmp_path / "sft.jsonl").is_file()
    samples = load_sft_samples(tokens)
    assert len(samples) == 3  # a variant's tool call and its submit merge into one path
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(str(model))
    s = next(x for x in samples if "backup" in str(tok.decode(x.prompt_ids + x.response_ids)))
    trained = tok.decode([t for t, m in zip(s.response_ids, s.loss_mask, strict=True) if m])
    assert '"command":"cp notes.txt backup.txt"' in trained and '"submit"' in trained
    observed = tok.decode([t for t, m in zip(s.response_ids, s.loss_mask, strict=True) if not m])
    assert "<tool_response>" in observed  # the tool's answer is context, not trained

    # SFT on the tiny model (same tokenizer family is not needed: ids are just ids)
    tiny = resolve_model("tiny")
    vocab = Trainer(TrainConfig(model=str(tiny)), tiny, device="cpu").model.config.vocab_size
    small = [
        SftSample(x.rollout_id, [i % vocab for i in x.prompt_ids[-24:]],
                  [i % vocab for i in x.response_ids], x.loss_mask, x.logprobs)
        for x in samples
    ]  # fmt: skip
    trainer = Trainer(TrainConfig(model=str(tiny), train_layers=1), tiny, device="cpu")
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    before = trainer.sequence_logprobs(small)
    for _ in range(3):
        result = trainer.sft_step(small, learning_rate=1e-2)
        assert result.accepted
    after = trainer.sequence_logprobs(small)
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    assert trainer.version == 3
    changed = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, frozen[n])}
    assert changed and all(n.startswith(("model.layers.1.", "model.norm")) for n in changed)


async def test_mini_swe_agent_teacher_runs_the_solution_and_submits(tmp_path: Path) -> None:
    """The teacher through mini-swe-agent, unmodified: its bash tool with the solution, then
    its own submit command; the verifier passes it and the calls export as SFT paths."""
    model = resolve_model("smollm2-135m")
    task = _task("copy-file")
    assert teacher_script(task, "mini-swe-agent") == [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "cp notes.txt backup.txt"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {
            "command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}]},
    ]  # fmt: skip
    assert list(await teacher_scripts(_task("two-lines"), "mini-swe-agent")) == ["bash"]
    options = {"step_limit": 3, "max_tokens": 64, "temperature": 1.0}
    results = await record_teacher([task], model, tmp_path, options, "mini-swe-agent")
    assert [(r.task_id, r.status, r.reward) for r in results] == [("copy-file", "completed", 1.0)]
    assert results[0].usage["policy"]["calls"] == 2  # the scripted engine's two replies
    tokens = await export_teacher_sft(tmp_path / "teacher.db", tmp_path / "sft.jsonl")
    assert tokens is not None
    (sample,) = load_sft_samples(tokens)
    from transformers import AutoTokenizer

    tok: Any = AutoTokenizer.from_pretrained(str(model))
    prompt = tok.decode(sample.prompt_ids)
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in prompt  # mini's own instance template
    trained = tok.decode(
        [t for t, m in zip(sample.response_ids, sample.loss_mask, strict=True) if m]
    )
    assert "cp notes.txt backup.txt" in trained and "echo COMPLETE_TASK" in trained
