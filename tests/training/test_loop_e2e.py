"""End to end on the `tiny` model: two async GRPO steps through a real gateway, orchestrator,
local sandboxes and a one-call agent; weight versions advance and every call is stamped."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest

from openforge.models.registry import resolve_model
from openforge.traces.source import open_store
from openforge.training.config import TrainConfig
from openforge.training.loop import LoopEnv, latest_checkpoint, run_loop
from openforge.training.report import write_run_report
from openforge.training.sampling import TaskSampler
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


def _gate_first_update(env: LoopEnv, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold step 0's update until one of step 1's rollouts has finished.

    Async overlap is a race: on a loaded machine the next step's rollouts can reach the
    engine only after step 0's weights were pushed, and then nothing is stale. The gate
    makes the overlap certain, and a loop that does not overlap fails here instead of
    hanging (a synchronous loop never starts step 1 before this update returns)."""
    train_step = env.trainer.train_step
    done = run_dir / "rollouts" / "step-000001" / "results.jsonl"
    gated = [True]

    def gate(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + 120
        while gated[0] and not (done.exists() and done.read_text().strip()):
            assert time.monotonic() < deadline, "step 1's rollouts did not run during step 0"
            time.sleep(0.05)
        gated[0] = False
        return train_step(*args, **kwargs)

    monkeypatch.setattr(env.trainer, "train_step", gate)


async def test_two_async_steps_advance_versions_and_stamp_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
            _gate_first_update(env, tmp_path / "run", monkeypatch)
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
    report = (await write_run_report(cfg, store_path, wall_s=1.0)).read_text()
    # step curves, and reward per skill (untagged tasks: each its own skill)
    assert report.count('src="data:image/png;base64,') == 2
    assert "<td style=text-align:left>say-2</td>" in report
    assert '<span class="t">' in report and "pass@2" in report
    assert "Engine tokens by role" in report
    # what the run cost, from the results files and the metrics
    cost = json.loads((tmp_path / "run" / "summary.json").read_text())["cost"]
    results = [
        json.loads(line)
        for p in sorted((tmp_path / "run" / "rollouts").glob("*/results.jsonl"))
        for line in p.read_text().splitlines()
    ]
    assert cost["rollouts"] == len(results) == 3 * 2 * 4 + 2 * 2  # 3 steps x B x G, 2 evals
    store = open_store(store_path)
    every = [c for r in await store.rollouts() for c in await store.calls(r.id)]
    await store.close()
    policy = cost["engine_tokens"]["policy"]
    assert policy["calls"] == sum(r["usage"]["policy"]["calls"] for r in results) == len(every)
    assert policy["prompt"] == sum(len(c.prompt_ids) for c in every)
    assert policy["output"] == sum(len(c.output_ids) for c in every)
    assert cost["sandbox_s"] == pytest.approx(sum(r["timings"]["total"] for r in results), 1e-3)
    train_tokens = sum(r["tokens"] for r in records if r["kind"] == "train")
    assert cost["trainer_tokens"] == train_tokens > 0
    assert set(cost["phases_s"]) >= {"GRPO rollouts", "GRPO updates", "weight sync", "evaluation"}
    assert "money" not in cost


async def test_step_whose_rollouts_all_failed_is_skipped(tmp_path: Path) -> None:
    import socket

    from openforge.engines.local import LocalEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    with socket.socket() as s:  # a port nothing listens on: every rollout is an infra error
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    model = resolve_model("tiny")
    store_path = tmp_path / "store.db"
    cfg = TrainConfig(
        model=str(model), steps=1, tasks_per_step=1, group_size=2,
        tasks=str(_suite(tmp_path / "suite")), harness="shell",
        rollout_options={"harness_options": {"command": "true"}, "retries": 0},
        run_dir=str(tmp_path / "run"),
    )  # fmt: skip
    gateway = Gateway(LocalEngine(str(model), threads=1), SqliteStore(store_path), model=model)
    async with gateway as gw:
        cfg = dataclasses.replace(cfg, admin_token=gw.admin_token)
        # The session opens on a live gateway (a dead one is refused at once); its
        # rollouts then find the gateway gone.
        async with open_session(cfg, gw.control_url, store_path) as env:
            env.gateway_url = dead
            summary = await run_loop(cfg, env, evaluate_edges=False)
    assert (summary.steps_done, summary.skipped, summary.version) == (1, 1, 0)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["reason"], r["masked_rollouts"]) for r in records] == [
        ("skip", "all rollouts failed", 2.0)
    ]


@pytest.mark.parametrize(("solved_advantage", "kl_coef"), [(0.0, 0.0), (0.2, 0.0), (0.0, 0.05)])
async def test_dynamic_sampling_draws_more_tasks_until_groups_have_a_spread(
    tmp_path: Path, solved_advantage: float, kl_coef: float
) -> None:
    """Two tasks always score 1 (no spread); dynamic sampling draws further rounds until B
    groups have a spread, and the uniform tasks rest in the next step. With a
    solved_advantage their groups are solved ones, with a KL term groups for the KL only:
    either way 2 rollouts of each are trained, and they still do not count as groups with
    a spread."""
    from openforge.engines.local import LocalEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    suite = _suite(tmp_path / "suite")
    for name in ("easy-0", "easy-1"):
        d = suite / name
        (d / "verify").mkdir(parents=True)
        (d / "workspace").mkdir()
        (d / "task.toml").write_text(
            f'id = "{name}"\ninstruction = "Say anything."\ntimeout = 120\n'
            'split = "train"\nnetwork = "gateway"\ntags = ["easy"]\n'
        )
        (d / "verify" / "verify.py").write_text("print('{\"reward\": 1.0}')\n")
    model = resolve_model("tiny")
    # G = 5: a say-* group has no spread with probability (1/7)^4
    cfg = TrainConfig(
        model=str(model), steps=2, tasks_per_step=2, group_size=5, learning_rate=1e-3,
        tasks=str(suite), harness="shell", max_sample_rounds=4, rest_steps=1,
        skill_rest_after=2, rollout_options={"harness_options": {"command": AGENT}}, concurrency=5,
        run_dir=str(tmp_path / "run"), solved_advantage=solved_advantage, kl_coef=kl_coef,
    )  # fmt: skip
    store_path = tmp_path / "store.db"
    gateway = Gateway(LocalEngine(str(model), threads=1), SqliteStore(store_path), model=model)
    async with gateway as gw:
        cfg = dataclasses.replace(cfg, admin_token=gw.admin_token)
        async with open_session(cfg, gw.control_url, store_path) as env:
            order = TaskSampler(env.train_tasks, cfg.seed)
            plain = [order.at(i).id for i in range(8)]
            await run_loop(cfg, env, evaluate_edges=False)
    # seed 0's plain order of the 4 train tasks, two epochs
    assert plain == ["say-0", "easy-0", "easy-1", "say-1", "say-1", "easy-0", "say-0", "easy-1"]
    runs = tmp_path / "run" / "rollouts"

    def drawn(tag: str) -> list[str]:
        lines = (runs / tag / "results.jsonl").read_text().splitlines()
        return sorted({json.loads(line)["task_id"] for line in lines})

    # step 0: say-0 (spread) + easy-0 (uniform, rests); then easy-1 (uniform); then say-1
    assert [drawn(t) for t in ("step-000000", "step-000000-r1", "step-000000-r2")] == [
        ["easy-0", "say-0"], ["easy-1"], ["say-1"],
    ]  # fmt: skip
    assert not (runs / "step-000000-r3").exists()
    # step 1: both easy tasks rest (uniform in step 0, rest_steps 1): say-1 and say-0
    assert drawn("step-000001") == ["say-0", "say-1"]
    assert not (runs / "step-000001-r1").exists()
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    keys = ("sample_rounds", "groups_drawn", "groups_kept", "groups_zero_variance")
    got = [{k: r[k] for k in (*keys, "groups_solved", "groups_kl_only", "samples")} for r in steps]
    solved = 2 if solved_advantage else 0  # the easy groups, each trained on 2 of its 5
    kl_only = 2 if kl_coef else 0
    assert got == [
        {"sample_rounds": 3, "groups_drawn": 4, "groups_kept": 2,
         "groups_zero_variance": 2 - solved, "groups_solved": solved,
         "groups_kl_only": kl_only, "samples": 10 + 2 * (solved + kl_only)},
        {"sample_rounds": 1, "groups_drawn": 2, "groups_kept": 2, "groups_zero_variance": 0,
         "groups_solved": 0, "groups_kl_only": 0, "samples": 10},
    ]  # fmt: skip
    if kl_coef:  # the reference is the policy GRPO started from: no drift before step 0's update
        assert steps[0]["kl"] == pytest.approx(0.0, abs=1e-6) and steps[1]["kl"] > 0
    # the two easy tasks are one skill (their tag): its second uniform group rested it
    assert [r["skills_resting"] for r in steps] == [1, 1]
    ckpt = latest_checkpoint(cfg.run_dir)
    assert ckpt is not None
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["extra"]["sampler"]["cursor"] == 7  # 4 draws in step 0, 3 looked at in step 1
    assert state["extra"]["sampler"]["skills_resting"] == {"easy": 0}
