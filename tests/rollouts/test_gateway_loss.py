"""A gateway SIGKILLed mid-run: the rollouts it held are infra errors, never scored 0.

Real gateway subprocesses, real bubblewrap sandboxes, real shell harnesses. The test and the
sandbox shake hands through files in the sandbox's workspace (a directory on this host), so
the kill lands exactly where each test wants it, with no sleeps.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import subprocess
from pathlib import Path

import httpx
import orjson

from openforge.rollouts import RolloutResult, load_results, run_rollouts, summarize
from openforge.store.sqlite import SqliteStore
from openforge.training.loop import read_samples

from .conftest import free_port, start_gateway
from .test_orchestrator import CALL_AND_WRITE, config, hello_task, native_task

# The body of a chat call, for a harness that makes its second call after the kill.
_SECOND_CALL = (
    'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "Authorization: Bearer $OPENAI_API_KEY" '
    "-H 'content-type: application/json' "
    '-d "{\\"model\\": \\"$OPENFORGE_MODEL\\", \\"messages\\": [{\\"role\\": \\"user\\", '
    '\\"content\\": \\"again\\"}]}" > hello.txt'
)
_WAIT_KILLED = "while [ ! -e killed ]; do sleep 0.05; done"


async def _handshake(sandboxes: Path, mark: str, gateway: subprocess.Popen[bytes]) -> None:
    """Wait for ``mark`` in a sandbox's workspace, SIGKILL the gateway, answer ``killed``."""
    while True:
        # The workspace is <id>/workspace, or <id>/fs/workspace on a disk of its own, or
        # behind the <id>/data link when the sandbox uid keeps its data elsewhere.
        found = [
            p for sub in ("", "fs/", "data/") for p in sandboxes.glob(f"*/{sub}workspace/{mark}")
        ]
        if found:
            break
        assert gateway.poll() is None, "the gateway died before the handshake"
        await asyncio.sleep(0.05)
    gateway.send_signal(signal.SIGKILL)
    gateway.wait(timeout=30)
    (found[0].parent / "killed").write_text("")


def _line(run: Path) -> dict[str, object]:
    lines = (run / "results.jsonl").read_bytes().splitlines()
    data: dict[str, object] = orjson.loads(lines[-1])
    return data


async def _masked(store_path: Path, results: list[RolloutResult]) -> None:
    """Nothing of ``results`` reaches training: no samples, every rollout masked."""
    store = SqliteStore(store_path)
    try:
        samples, counts = await read_samples(store, results, "merged")
    finally:
        await store.close()
    assert samples == [] and counts.masked_rollouts["infra_error"] == len(results)
    summary = summarize(results, ks=[1])
    assert summary.mean_reward is None and summary.pass_at == {}
    assert summary.statuses["infra_error"] == len(results)


async def test_gateway_killed_mid_run_is_infra_error_and_a_retry_completes(
    tmp_path: Path,
) -> None:
    port, admin_port, token = free_port(), free_port(), secrets.token_urlsafe(32)
    gw_dir = tmp_path / "gw"
    gw_dir.mkdir()
    url = f"http://127.0.0.1:{admin_port}"
    headers = {"Authorization": f"Bearer {token}"}
    proc = start_gateway(gw_dir, port, admin_port, token)
    # One call that works, then (after the kill) one that is refused: curl exits 22 and the
    # task's verifier would score the missing hello.txt 0.
    harness = f"{CALL_AND_WRITE.replace('hello.txt', 'first.txt')} && touch called && "
    harness += f"{_WAIT_KILLED}; {_SECOND_CALL}"
    cfg = config(url, tmp_path, [hello_task()], harness, retries=1, admin_token=token)
    try:
        run = asyncio.ensure_future(run_rollouts(cfg))
        await _handshake(tmp_path / "sandboxes", "called", proc)
        (res,) = await run
        assert (res.status, res.reward, res.attempts) == ("infra_error", None, 2)
        assert "gateway mint" in str(res.error)  # the retry found the gateway still gone
        assert len(res.unfinished) == 1  # the first attempt's finish never reached it
        line = _line(tmp_path / "run")
        assert line["status"] == "infra_error" and line["reward"] is None
        await _masked(gw_dir / "store.db", [res])
        first = res.unfinished[0]

        # The gateway comes back on the same store: a retry run completes the rollout and
        # closes the one the lost gateway left open.
        proc = start_gateway(gw_dir, port, admin_port, token)
        retry = config(
            url, tmp_path, [hello_task()], CALL_AND_WRITE, retry_infra=True, admin_token=token
        )
        (again,) = await run_rollouts(retry)
        assert (again.status, again.reward, again.error) == ("completed", 1.0, None)
        assert again.unfinished == []
        left = httpx.get(f"{url}/admin/rollouts/{first}", headers=headers).json()
        assert left["status"] == "infra_error" and left["reward"] is None
        done = httpx.get(f"{url}/admin/rollouts/{again.rollout_id}", headers=headers).json()
        assert done["status"] == "completed" and done["reward"] == 1.0
        assert load_results(tmp_path / "run")[("hello-file", 0)].status == "completed"
    finally:
        proc.kill()
        proc.wait(timeout=30)


async def test_finish_not_recorded_is_infra_error_not_the_verifiers_reward(
    tmp_path: Path,
) -> None:
    port, admin_port, token = free_port(), free_port(), secrets.token_urlsafe(32)
    gw_dir = tmp_path / "gw"
    gw_dir.mkdir()
    proc = start_gateway(gw_dir, port, admin_port, token)
    # The agent succeeds while the gateway lives; the verifier then holds until the gateway is
    # dead and scores 1.0, which the gateway can no longer record.
    verify = (
        "import json, os, pathlib, time\n"
        "pathlib.Path('verifying').touch()\n"
        "while not os.path.exists('killed'): time.sleep(0.05)\n"
        "print(json.dumps({'reward': 1.0}))\n"
    )
    task = native_task(tmp_path / "tasks", "late", verify=verify)
    url = f"http://127.0.0.1:{admin_port}"
    cfg = config(url, tmp_path, [task], CALL_AND_WRITE, retries=0, admin_token=token)
    try:
        run = asyncio.ensure_future(run_rollouts(cfg))
        await _handshake(tmp_path / "sandboxes", "verifying", proc)
        (res,) = await run
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert (res.status, res.reward, res.attempts) == ("infra_error", None, 1)
    assert "finish not recorded (completed, reward 1.0)" in str(res.error)
    assert res.finish_error and res.unfinished == [res.rollout_id]
    line = _line(tmp_path / "run")
    assert line["status"] == "infra_error" and line["reward"] is None
    await _masked(gw_dir / "store.db", [res])
