"""End to end on the `tiny` model: two async GRPO steps through a real gateway, orchestrator,
local sandboxes and a one-call agent; weight versions advance and every call is stamped."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from openforge.models.registry import resolve_model
from openforge.training.config import TrainConfig
from openforge.training.loop import LoopEnv, latest_checkpoint, run_loop
from openforge.training.quickstart import write_report
from openforge.training.session import open_session

pytestmark = pytest.mark.slow

# One chat call; the answer goes to answer.txt. The verifier's reward is a function of the
# answer's length, so a random model's answers give a group a reward spread: with 4 samples
# a group has none with probability (1/7)^3, so a step with no update (2 groups) is ~1e-5.
AGENT = r"""python3 - <<'PY'
import json, os, urllib.request
body = {"model": os.environ["OPENFORGE_MODEL"], "max_tokens": 12, "temperature": 1.0,
        "messages": [{"role": "user", "content": os.environ["OPENFORGE_INSTRUCTION"]}]}
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(), headers={"Content-Type": "application/json",
    "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
out = json.load(urllib.request.urlopen(req, timeout=120))
open("answer.txt", "w").write(out["choices"][0]["message"]["content"] or "")
PY"""

VERIFY = """import dataclasses
import json
text = open("answer.txt").read() if __import__("os").path.exists("answer.txt") else ""
print(json.dumps({"reward": (len(text) % 7) / 6, "details": {"chars": len(text)}}))
"""


def _suite(root: Path) -> Path:
    for i, split in enumerate(["train", "train", "test"]):
        d = root / f"say-{i}"
        (d / "verify").mkdir(parents=True)
        (d / "workspace").mkdir()
        (d / "workspace" / "README").write_text("scratch\n")
        (d / "task.toml").write_text(
            f'id = "say-{i}"\ninstruction = "Say something about the number {i}."\n'
            f'timeout = 120\nsplit = "{split}"\nnetwork = "gateway"\n'
        )
        (d / "verify" / "verify.py").write_text(VERIFY)
    return root


async def test_two_async_steps_advance_versions_and_stamp_calls(tmp_path: Path) -> None:
    from openforge.engines.local import LocalEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    model = resolve_model("tiny")
    cfg = TrainConfig(
        model=str(model), steps=2, tasks_per_step=2, group_size=4, async_rollouts=True,
        max_staleness=1, learning_rate=1e-3, tasks=str(_suite(tmp_path / "suite")),
        harness="shell", rollout_options={"harness_options": {"command": AGENT}},
        concurrency=4, run_dir=str(tmp_path / "run"), eval_samples=2,
    )  # fmt: skip
    store_path = tmp_path / "store.db"
    engine = LocalEngine(str(model), threads=1)
    gateway = Gateway(engine, SqliteStore(store_path), model=model)
    warmups: list[int] = []

    async def warmup(c: TrainConfig, e: LoopEnv) -> None:  # runs after "before", once
        warmups.append(len(e.metrics.read()))

    async with gateway as gw:
        cfg = dataclasses.replace(cfg, admin_token=gw.admin_token)
        async with open_session(cfg, gw.control_url, store_path) as env:
            summary = await run_loop(cfg, env, warmup=warmup)
            calls = [c for r in await env.store.rollouts() for c in await env.store.calls(r.id)]
        # a restart with one more step resumes from the checkpoint of step 2
        more = dataclasses.replace(cfg, steps=3)
        async with open_session(more, gw.control_url, store_path) as env:
            assert env.trainer.version == 0  # fresh trainer until the loop resumes
            resumed = await run_loop(more, env, evaluate_edges=False, warmup=warmup)
            status = await env.sync.status()
    assert summary.steps_done == 2
    assert warmups == [1]  # after the "before" eval record; a resumed run skips it
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [(r["step"], r["version"]) for r in train] == [(0, 1), (1, 2), (2, 3)], records
    assert summary.version == 2
    # async: step 1's rollouts were sampled with version 0 while step 0 trained
    assert train[1]["staleness_max"] >= 1
    evals = [r for r in records if r["kind"] == "eval"]
    assert [e["tag"] for e in evals] == ["before", "after"]
    assert {e["version"] for e in evals} == {0, 2}
    # every call is stamped with the version whose weights sampled it
    assert calls and {c.weight_version for c in calls} <= {"0", "1", "2"}
    assert "2" in {c.weight_version for c in calls}  # the after-eval ran on the pushed weights
    ckpt = latest_checkpoint(cfg.run_dir)
    assert ckpt is not None and ckpt.name == "step-000003"
    assert (tmp_path / "run" / "tensorboard").is_dir()
    assert (resumed.steps_done, resumed.version) == (3, 3)
    assert status["weight_version"] == "3"
    report = (await write_report(cfg, store_path)).read_text()
    assert "<svg" in report and '<span class="t">' in report and "pass@2" in report


async def test_step_whose_rollouts_all_failed_is_skipped(tmp_path: Path) -> None:
    import socket

    from openforge.store.sqlite import SqliteStore

    with socket.socket() as s:  # a port nothing listens on: every rollout is an infra error
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    store_path = tmp_path / "store.db"
    await SqliteStore(store_path).close()
    cfg = TrainConfig(
        model=str(resolve_model("tiny")), steps=1, tasks_per_step=1, group_size=2,
        tasks=str(_suite(tmp_path / "suite")), harness="shell",
        rollout_options={"harness_options": {"command": "true"}, "retries": 0},
        run_dir=str(tmp_path / "run"), gateway_url=dead, store=str(store_path),
    )  # fmt: skip
    async with open_session(cfg) as env:
        summary = await run_loop(cfg, env, evaluate_edges=False)
    assert (summary.steps_done, summary.skipped, summary.version) == (1, 1, 0)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["reason"], r["masked_rollouts"]) for r in records] == [
        ("skip", "all rollouts failed", 2.0)
    ]
