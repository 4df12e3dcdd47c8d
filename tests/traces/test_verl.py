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


def test_padded_tensors_match_rows(built: Built, tmp_path: Path) -> None:
    """``verl_tensors`` (vectorized) against the rows padded one by one (no veRL needed)."""
    import numpy as np
    import pyarrow.parquet as pq

    from openforge.traces.export import verl_tensors

    out = tmp_path / "t.parquet"
    args = ["traces", "export", "--store", str(built.path), "--mode", "per_call", "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    table = pq.read_table(out)
    t = verl_tensors(table, pad_id=7)
    rows = table.to_pylist()
    p_max = max(len(r["prompts"]) for r in rows)
    for i, r in enumerate(rows):
        p, n = len(r["prompts"]), len(r["responses"])
        assert t["prompts"][i].tolist() == [7] * (p_max - p) + r["prompts"]
        assert t["responses"][i, :n].tolist() == r["responses"]
        assert set(t["responses"][i, n:].tolist()) <= {7}
        assert t["response_mask"][i, :n].tolist() == r["response_mask"]
        assert np.allclose(t["rollout_log_probs"][i, :n], r["rollout_log_probs"])
        assert t["token_level_scores"][i].sum() == t["token_level_scores"][i, n - 1] == r["reward"]
        mask = t["attention_mask"][i].tolist()
        assert mask == [0] * (p_max - p) + [1] * (p + n) + [0] * (len(mask) - p_max - n)
        assert t["position_ids"][i, p_max - p : p_max + n].tolist() == list(range(p + n))
