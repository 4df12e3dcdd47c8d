"""``openforge train`` with the curriculum on: the `tiny` model through a real gateway,
orchestrator and local sandboxes. Level 1 of a skill stays locked until level 0 is mastered;
each step logs the per-bucket pass rates and the mix it drew."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.models.registry import resolve_model

from .test_loop_e2e import AGENT

pytestmark = pytest.mark.slow

_ANSWER = 'text = open("answer.txt").read() if os.path.exists("answer.txt") else ""\n'
# easy at level 0 always passes (mastered: it opens level 1); at level 1 an even-length
# answer passes; say passes on an even length too (about half the time: within the band)
_VERIFY = {
    "always": 'import json\nprint(json.dumps({"reward": 1.0}))\n',
    "even": f"import json, os\n{_ANSWER}"
    'print(json.dumps({"reward": float(len(text) % 2 == 0)}))\n',
}


def _task(root: Path, name: str, split: str, tags: list[str], verify: str) -> None:
    d = root / name
    (d / "verify").mkdir(parents=True)
    (d / "workspace").mkdir()
    (d / "workspace" / "README").write_text("scratch\n")
    (d / "task.toml").write_text(
        f'id = "{name}"\ninstruction = "Say something about {name}."\ntimeout = 120\n'
        f'split = "{split}"\nnetwork = "gateway"\ntags = {json.dumps(tags)}\n'
    )
    (d / "verify" / "verify.py").write_text(_VERIFY[verify])


def test_train_with_the_curriculum_logs_rates_and_mix(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    for n in range(2):
        _task(suite, f"easy-{n}", "train", ["toy", "easy"], "always")
        _task(suite, f"easy-L1-{n}", "train", ["toy", "easy", "level-1"], "even")
        _task(suite, f"say-{n}", "train", ["toy", "say"], "even")
    _task(suite, "say-test", "test", ["toy", "say"], "even")
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        f"model: {resolve_model('tiny')}\nsteps: 2\ntasks_per_step: 3\ngroup_size: 2\n"
        f"tasks: {suite}\nharness: shell\nconcurrency: 2\nthreads: 1\nlearning_rate: 0.001\n"
        f"run_dir: {tmp_path / 'run'}\neval_samples: 1\n"
        "curriculum: true\ncurriculum_explore: 0.0\n"
        f"rollout_options: {{harness_options: {{command: {json.dumps(AGENT)}}}}}\n"
    )
    openforge = Path(sys.executable).with_name("openforge")
    proc = subprocess.run(
        [str(openforge), "train", str(cfg)], capture_output=True, text=True, timeout=900,
        env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    steps = [r for r in records if r["kind"] in ("train", "skip")]
    assert [r["step"] for r in steps] == [0, 1]
    first, second = steps
    # step 0: level 1 is locked, so level-0 tasks only; three of them, so easy's among them
    # (say has two), and easy@0 passed every rollout
    assert set(first["curriculum_mix"]) == {"easy@0", "say@0"}
    assert sum(first["curriculum_mix"].values()) == 3
    assert first["curriculum_rates"]["easy@0"] == 1.0
    # mastered (weight explore = 0): step 1 draws easy at level 1, never at level 0 (with
    # say's two tasks and the three drawn, level 1 is certain to be among them)
    assert "easy@1" in second["curriculum_mix"] and "easy@0" not in second["curriculum_mix"]
    assert sum(second["curriculum_mix"].values()) == 3
    assert "curriculum pass rates" in proc.stderr and "drew" in proc.stderr
