"""``openforge gateway --workers N``: N processes on one port over the shared PostgreSQL store.

Every turn of one rollout goes over a new connection, so the kernel hands the turns to
either worker; the rollout's sequence stays gapless and every call extends the previous
one token-exactly. A SIGTERM to the parent stops every worker; a SQLite store is refused.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from openforge.gateway.server import GatewayProcess

from .conftest import MODEL, write_script
from .test_replicas import SCRIPT, _base, _extends, _mint, _recorded, _turn


def _workers(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow
async def test_two_workers_on_one_port_serve_a_rollout_token_exactly(
    postgres_url: str, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "s.jsonl", SCRIPT)
    args = ["--engine", "scripted", "--script", str(script), "--model", MODEL]
    args += ["--store", postgres_url, "--workers", "2"]
    proc = await GatewayProcess.start(args)
    try:
        workers = _workers(proc.proc.pid)
        assert len(workers) == 2
        minted = await _mint(proc)
        msgs: list[Any] = [{"role": "user", "content": "List the files, twelve times."}]
        for i in range(12):
            async with openai.AsyncOpenAI(base_url=_base(proc, minted["key"]), api_key="x") as c:
                await _turn(c, msgs, stream=i % 2 == 1)
        calls = await _recorded(proc, minted["rollout_id"])
        assert [c["seq"] for c in calls] == list(range(len(calls))) and len(calls) == 12
        assert all(c["status"] == "ok" for c in calls)
        assert all(_extends(a, b) for a, b in itertools.pairwise(calls))
    finally:
        assert await proc.stop() == 0
    assert all(not Path(f"/proc/{w}").exists() or _zombie(w) for w in workers)


def _zombie(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_workers_need_the_shared_store(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "openforge.gateway", "--engine", "scripted", "--model", MODEL,
         "--store", str(tmp_path / "s.db"), "--workers", "2", "--port", "0"],
        capture_output=True, text=True, env={**os.environ}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--workers needs the shared PostgreSQL store" in done.stderr
