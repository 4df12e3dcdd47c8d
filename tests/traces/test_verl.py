"""The veRL export loads into ``verl.DataProto`` and GRPO's advantage runs on it.

veRL is not in the project's venv (it pulls Ray and more). The check runs in-process when
``verl`` imports, else in the interpreter named by ``OPENFORGE_VERL_PYTHON`` (a venv with
``verl==0.9.1 torch==2.13.0 orjson``), else it is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from openforge.cli import app

from .store_data import Built

SRC = Path(__file__).resolve().parents[2] / "src"

CHECK = r"""
import pickle, sys
import numpy as np, pyarrow.parquet as pq, torch
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from openforge.traces.export import to_dataproto

proto = to_dataproto(pq.read_table(sys.argv[1]))
assert isinstance(proto, DataProto)
proto = pickle.loads(pickle.dumps(proto))
b = proto.batch
n, p = b["prompts"].shape
r = b["responses"].shape[1]
assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape == (n, p + r)
assert torch.equal(b["input_ids"][:, p:], b["responses"])
adv, ret = compute_grpo_outcome_advantage(
    token_level_rewards=b["token_level_scores"],
    response_mask=b["response_mask"],
    index=proto.non_tensor_batch["uid"],
)
assert adv.shape == (n, r)
assert torch.all(adv[b["response_mask"] == 0] == 0)
rewards = b["token_level_scores"].sum(-1)
per_sample = (adv * b["response_mask"]).sum(-1) / b["response_mask"].sum(-1)
print("rewards", rewards.tolist())
print("advantages", [round(x, 4) for x in per_sample.tolist()])
"""


def _python() -> list[str] | None:
    if importlib.util.find_spec("verl") is not None:
        return [sys.executable]
    other = os.environ.get("OPENFORGE_VERL_PYTHON")
    return [other] if other else None


def test_verl_export_runs_grpo(built: Built, tmp_path: Path) -> None:
    python = _python()
    if python is None:
        print("skip: verl is not importable and OPENFORGE_VERL_PYTHON is not set")
        pytest.skip("verl is not importable and OPENFORGE_VERL_PYTHON is not set")
    out = tmp_path / "train.parquet"
    result = CliRunner().invoke(
        app, ["traces", "export", "--store", str(built.path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [*python, "-c", CHECK, str(out)], capture_output=True, text=True, env=env, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    rewards = eval(lines["rewards"])  # a printed list of floats
    advantages = eval(lines["advantages"])
    # Group g1: the good rollout (1.0) and the bad one's two paths (0.0, 0.0); unbiased std.
    assert sorted(rewards) == [0.0, 0.0, 1.0]
    assert sorted(advantages) == pytest.approx([-0.5774, -0.5774, 1.1547], abs=1e-3)
