"""What the published suites' graders share: copy the agent's workspace out of the sandbox,
and run the suite's own grading code from the user's checkout in a child Python process.

The child runs with the checkout's code first on ``PYTHONPATH`` and gets its input as JSON on
stdin; it prints one JSON object as the last line of stdout. A child that crashes, runs past
its timeout or prints no such line is a :class:`VerifierError`, so the rollout is
``infra_error`` and never scores 0. The child is a separate process because suite graders are
arbitrary code (they ``exec`` task files, import their own packages, may hang).

The judge a suite's rubric needs is a :class:`~openforge.tasks.judge.Judge` that the run
gives the grader (a judge-role key on the gateway, so its calls are recorded under the rollout
and never trained on), else ``OPENFORGE_JUDGE_*``; ``Judge`` and ``judge_from_env`` are
re-exported here for graders written against this module.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

import orjson

from openforge.sandboxes.base import Sandbox
from openforge.tasks.judge import Judge, judge_from_env
from openforge.tasks.model import VERIFY_DIR
from openforge.tasks.verify import VerifierError

__all__ = ["Judge", "judge_from_env", "run_suite_code", "snapshot_workspace"]

_TAR = "/tmp/openforge-workspace.tar"
_KEEP = 8000


async def snapshot_workspace(sandbox: Sandbox, workdir: str, dest: Path) -> None:
    """Copy the sandbox's workdir (without the verifier's own directory) to ``dest``."""
    cmd = ["tar", "-cf", _TAR, f"--exclude=./{VERIFY_DIR}", "-C", workdir, "."]
    res = await sandbox.exec(cmd, timeout=120)
    if res.exit_code != 0:
        err = res.stderr[-_KEEP:].decode(errors="replace")
        raise VerifierError(f"could not copy the workspace out (tar exited {res.exit_code})", err)
    got = await sandbox.get([_TAR])
    if _TAR not in got:
        raise VerifierError("could not copy the workspace out: the archive is missing")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(got[_TAR])) as tar:
        tar.extractall(dest, filter="data")


async def run_suite_code(
    script: Path,
    pythonpath: list[Path],
    cwd: Path,
    payload: dict[str, Any],
    timeout_s: float,
) -> tuple[dict[str, Any], str]:
    """Run ``script`` with ``payload`` on stdin; its last stdout line as a dict, and its log."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never write into the user's checkout
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(orjson.dumps(payload)), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise VerifierError(f"the suite's grader ran past {timeout_s:g}s") from None
    log = err[-_KEEP:].decode(errors="replace")
    if proc.returncode != 0:
        raise VerifierError(f"the suite's grader exited with status {proc.returncode}", log)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        result = orjson.loads(lines[-1]) if lines else None
    except orjson.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        raise VerifierError("the suite's grader printed no result", log)
    return result, log
