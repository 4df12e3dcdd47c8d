"""``openforge rollout`` / ``openforge eval`` as subprocesses: results, summary, Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal
from itertools import combinations
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.rollouts import pass_at_k, pass_hat_k

from .conftest import OPENFORGE, admin_headers
from .test_orchestrator import _processes_with

pytestmark = pytest.mark.slow


def _suite(root: Path, timeout: int = 60) -> Path:
    for tid, instruction in (("pass", "1"), ("fail", "0")):
        d = root / tid
        (d / "verify").mkdir(parents=True)
        (d / "task.toml").write_text(
            f'id = "{tid}"\ninstruction = "{instruction}"\ntimeout = {timeout}\n'
        )
        # reward 1 when the harness wrote "1"
        (d / "verify" / "verify.py").write_text(
            "import json\nok = open('r.txt').read().strip() == '1'\n"
            "print(json.dumps({'reward': 1.0 if ok else 0.0}))\n"
        )
    return root


async def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        OPENFORGE,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_eval_reports_pass_at_k(gateway: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite")
    # Every sample of "pass" writes 1 (its instruction), every sample of "fail" writes 0.
    cmd = 'echo "$OPENFORGE_INSTRUCTION" > r.txt'
    rc, out = await _run(
        "eval",
        "--tasks",
        str(suite),
        "--harness",
        "shell",
        "-O",
        f"command={cmd}",
        "--n",
        "3",
        "--k",
        "1",
        "--k",
        "2",
        "--gateway",
        gateway,
        "--out",
        str(tmp_path / "run"),
        "--price-sandbox-hour",
        "3.6",
        "--concurrency",
        str(len(os.sched_getaffinity(0)) + 1),
        env={"TMPDIR": str(tmp_path)},
    )
    assert rc == 0, out
    # More rollouts at once than cores: said before the run starts.
    assert f"exceeds this machine's {len(os.sched_getaffinity(0))} cores" in out
    # Not a terminal: progress comes as lines, the last one when the last rollout ends.
    assert "rollouts 0/6, pass rate -" in out
    assert "rollouts 6/6, pass rate 50% (3/6), mean reward 0.500" in out and "ETA 0:00" in out
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["total"] == 6 and summary["statuses"]["completed"] == 6
    assert summary["pass_at"] == {"1": 0.5, "2": 0.5}
    assert summary["pass_hat"] == {"1": 0.5, "2": 0.5}
    per_task = {t["task_id"]: t for t in summary["tasks"]}
    assert per_task["pass"]["pass_at"] == {"1": 1.0, "2": 1.0} and per_task["fail"]["passed"] == 0
    assert "pass@2" in out and "overall" in out
    lines = (tmp_path / "run" / "results.jsonl").read_bytes().splitlines()
    results = [orjson.loads(x) for x in lines]
    assert sorted((r["task_id"], r["sample"]) for r in results) == [
        (t, i) for t in ("fail", "pass") for i in range(3)
    ]
    # Each rollout's gateway id is printed, the argument `openforge traces show` takes.
    assert "rollout ids (openforge traces show ID --store STORE):" in out
    for r in results:
        assert f"  {r['rollout_id']}  {r['task_id']} #{r['sample']}  completed  " in out
    # what it cost: this harness calls no model, so sandbox time only, priced per hour
    cost = summary["cost"]
    sandbox_s = sum(r["timings"]["total"] for r in results)
    assert cost["rollouts"] == 6 and cost["engine_tokens"] == {}
    assert cost["sandbox_s"] == pytest.approx(sandbox_s, abs=1e-2) and sandbox_s > 0
    assert cost["money"]["sandboxes"] == pytest.approx(cost["sandbox_s"] / 1000, rel=1e-3)
    assert cost["prices"] == {"sandbox_per_hour": 3.6} and cost["wall_s"] > 0
    assert "cost: " in out and "sandbox-s" in out and "price " in out
    # Each result says how loaded the host was while it ran.
    for r in results:
        assert r["host"].keys() >= {"cores", "load_start", "load_end", "slot_wait_s"}
        assert r["host"]["engine_queue_s"] == 0 and r["host"]["overloaded"] in (0.0, 1.0)
    run_id = orjson.loads((tmp_path / "run" / "run.json").read_bytes())["run_id"]
    assert f"run id: {run_id}" in out


async def test_malformed_task_is_named_and_the_rest_runs(gateway: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite")
    (suite / "broken" / "verify").mkdir(parents=True)
    (suite / "broken" / "verify" / "verify.sh").write_text("echo '{\"reward\": 1}'\n")
    (suite / "broken" / "task.toml").write_text('id = "broken"\ntimeout = -1\ninstruction="x"\n')
    rc, out = await _run(
        "rollout",
        "--tasks",
        str(suite),
        "--harness",
        "shell",
        "-O",
        "command=echo 1 > r.txt",
        "--gateway",
        gateway,
        "--out",
        str(tmp_path / "run"),
        env={"TMPDIR": str(tmp_path)},
    )
    assert rc == 0, out
    assert "broken/task.toml: timeout: must be a positive number" in out
    assert len((tmp_path / "run" / "results.jsonl").read_bytes().splitlines()) == 2


async def test_ctrl_c_leaves_no_process_or_sandbox_behind(gateway: str, tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite", timeout=600)
    marker = "8123.5"
    proc = await asyncio.create_subprocess_exec(
        OPENFORGE,
        "rollout",
        "--tasks",
        str(suite),
        "--harness",
        "shell",
        "-O",
        f"command=sleep {marker} & sleep {marker}; wait",
        "--n",
        "2",
        "--concurrency",
        "4",
        "--gateway",
        gateway,
        "--out",
        str(tmp_path / "run"),
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    sandboxes = tmp_path / "openforge-sandboxes"
    for _ in range(600):
        if len(_processes_with(marker)) >= 8:  # 4 rollouts x 2 sleeps
            break
        await asyncio.sleep(0.05)
    assert len(_processes_with(marker)) >= 8
    assert len(list(sandboxes.iterdir())) == 4
    sids = [d.name for d in sandboxes.iterdir()]
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, err.decode()
    assert "rerun" in err.decode()
    assert _processes_with(marker) == []
    assert list(sandboxes.iterdir()) == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert not [sid for sid in sids if sid in mounts]  # no sandbox disk left mounted
    assert not (tmp_path / "run" / "results.jsonl").exists()
    run_id = orjson.loads((tmp_path / "run" / "run.json").read_bytes())["run_id"]
    listed = httpx.get(
        f"{gateway}/admin/rollouts",
        params={"group_id": f"{run_id}/pass"},
        headers=admin_headers(),
    ).json()
    assert [r["status"] for r in listed["rollouts"]] == ["infra_error"] * 2


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_unbiased_estimators_match_enumeration(n: int) -> None:
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(combinations(outcomes, k))
            assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
            assert pass_hat_k(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
