"""What the published suites' graders share: copy the agent's workspace out of the sandbox,
and run the suite's own grading code from the user's checkout in a child Python process (the
older single-task layouts instead run their task's ``grade()`` in the sandbox through
:data:`GRADER_WRAPPER`).

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
import secrets
import sys
import tarfile
from pathlib import Path
from typing import Any

import orjson

from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.fspaths import PathEscape
from openforge.tasks.grading import VerifierError
from openforge.tasks.judge import Judge, judge_from_env
from openforge.tasks.model import VERIFY_DIR, TaskError
from openforge.tasks.native import ID_RE

__all__ = [
    "GRADER_WRAPPER",
    "Judge",
    "check_id",
    "judge_from_env",
    "run_suite_code",
    "snapshot_workspace",
]

# The verifier of the older single-task layouts (ClawEval's task.yaml + grader.py,
# PinchBench's task_*.md): it runs the task's own grade() in the sandbox, formatted with the
# arguments that layout's grade() takes, and prints OpenForge's reward line.
GRADER_WRAPPER = """\
import importlib.util, inspect, json, os, sys
d = os.environ["OPENFORGE_VERIFY_DIR"]
spec = importlib.util.spec_from_file_location("grader", os.path.join(d, "grader.py"))
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
ws = os.getcwd()
n = len(inspect.signature(mod.grade).parameters)
out = mod.grade(%s)
if isinstance(out, dict):
    if "reward" in out or "score" in out:
        reward = float(out.get("reward", out.get("score")))
    else:
        vals = [float(v) for v in out.values()]
        reward = sum(vals) / len(vals) if vals else 0.0
else:
    reward = float(out)
print(json.dumps({"reward": reward, "details": out if isinstance(out, dict) else {}}))
"""


def check_id(file: Path, field_name: str, value: Any) -> str:
    """``value`` as a task id, or TaskError naming ``file`` and ``field_name``."""
    if not isinstance(value, str) or not ID_RE.match(value):
        raise TaskError(file, field_name, f"must be a string of [A-Za-z0-9._/-], got {value!r}")
    return value


_KEEP = 8000
# What a grader may copy out of a sandbox (as a tar): a flood stays in the sandbox.
MAX_WORKSPACE = 256 * 1024 * 1024


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, skipping (not raising on) what it refuses: a link the
    agent pointed outside its workspace is left out, never a crash of the grading."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


async def snapshot_workspace(sandbox: Sandbox, workdir: str, dest: Path) -> str | None:
    """Copy the sandbox's workdir (without the verifier's own directory) to ``dest``.

    Returns None, or why the workspace could not be copied while the sandbox answered: the
    agent made it so (a workspace over :data:`MAX_WORKSPACE` bytes, files tar cannot read),
    and the grader then sees what was copied, maybe nothing, as ClawEval's and
    QwenClawBench's runners would. A sandbox that does not answer raises ``SandboxError``.
    """
    dest.mkdir(parents=True, exist_ok=True)
    tar = f"/tmp/.openforge-ws-{secrets.token_hex(8)}.tar"
    pack = '[ ! -e "$1" ] || exit 90; tar -cf "$1" "$2" -C "$3" .; rc=$?; wc -c < "$1"; exit $rc'
    res = await sandbox.exec(
        ["sh", "-c", pack, "sh", tar, f"--exclude=./{VERIFY_DIR}", workdir], timeout=120
    )
    size = res.stdout.strip()
    # GNU tar exits 1 when a file changed as it was read: the archive is still whole.
    if res.timed_out or res.exit_code not in (0, 1) or not size.isdigit():
        err = res.stderr[-500:].decode(errors="replace")
        return f"the workspace could not be copied (tar exited {res.exit_code}): {err}"
    if int(size) > MAX_WORKSPACE:
        return f"the workspace is larger than {MAX_WORKSPACE} bytes as a tar: not copied"
    try:
        got = await sandbox.get([tar])
    except PathEscape as exc:
        return f"the workspace archive could not be read: {exc}"
    if tar not in got:
        return "the workspace archive is missing"
    try:
        with tarfile.open(fileobj=io.BytesIO(got[tar])) as archive:
            archive.extractall(dest, filter=_safe_member)
    except (tarfile.TarError, OSError) as exc:
        return f"the workspace archive could not be unpacked: {exc}"
    return None


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
