"""Run a harness through the orchestrator against a gateway whose engine plays a script.

Used by ``openforge harness fingerprint`` and the harness tests: an in-process gateway
(scripted engine, SQLite store in a scratch dir), the real orchestrator, the local
bubblewrap backend, one task; the result and every call the gateway recorded come back.

:data:`SOLUTIONS` holds, per harness, a script that solves claw-mini's ``hello-file``
with that harness's own file or shell tool, and :data:`WRONG` one that writes the
wrong content.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from openforge.harnesses.base import Harness
from openforge.models.registry import DEFAULT_MODEL, resolve_model
from openforge.rollouts.config import RolloutConfig, RolloutResult
from openforge.sandboxes.runtime import SANDBOX_WORKDIR
from openforge.store.schemas import CallRecord, Rollout
from openforge.tasks.model import Task

__all__ = ["DEFAULT_MODEL", "SOLUTIONS", "WRONG", "ProbeRun", "hello_task", "probe", "tool_reply"]

_DONE = {"text": "Done."}
_SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's end marker


def tool_reply(name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted reply calling tool ``name`` with ``arguments``."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def _solutions(content: str) -> dict[str, list[dict[str, Any]]]:
    shell = f"printf '{content}\\n' > hello.txt"
    return {
        "claw": [
            tool_reply("write", path="hello.txt", content=content + "\n"),
            tool_reply("submit", answer="done"),
        ],
        "claude-code": [
            tool_reply("Write", file_path=f"{SANDBOX_WORKDIR}/hello.txt", content=content + "\n"),
            _DONE,
        ],
        "codex": [tool_reply("exec_command", cmd=shell), _DONE],
        "openclaw": [tool_reply("write", path="hello.txt", content=content + "\n"), _DONE],
        # Its default mini.yaml: one `bash` function tool; it stops on this echo.
        "mini-swe-agent": [
            tool_reply("bash", command=shell),
            tool_reply("bash", command=f"echo {_SUBMIT}"),
        ],
        "mini-swe-agent/text": [
            {"text": f"THOUGHT: write the file.\n\n```mswea_bash_command\n{shell}\n```"},
            {"text": f"THOUGHT: done.\n\n```mswea_bash_command\necho {_SUBMIT}\n```"},
        ],
        "shell": [_DONE],
    }


SOLUTIONS = _solutions("hello")
WRONG = _solutions("goodbye")


@dataclass(slots=True)
class ProbeRun:
    """What one probe produced."""

    result: RolloutResult
    calls: list[CallRecord]
    rollout: Rollout | None  # the gateway's record (status, metadata, details)
    reply_ids: list[list[int]]  # the engine's output ids, per script line
    run_dir: Path


def hello_task(memory_mb: int = 2048, pids: int = 512, timeout_s: float = 240.0) -> Task:
    """claw-mini's ``hello-file``, with room for a Node harness (its 512 MB is claw-sized)."""
    from openforge.suites import load_tasks

    task = load_tasks("claw-mini").by_id()["hello-file"]
    return dataclasses.replace(task, memory_mb=memory_mb, pids=pids, timeout_s=timeout_s)


async def probe(
    harness: Harness,
    replies: list[dict[str, Any]],
    work: Path,
    task: Task | None = None,
    model: str | Path = DEFAULT_MODEL,
    max_context: int | None = None,
    metadata: dict[str, Any] | None = None,
    judge_replies: list[dict[str, Any]] | None = None,
    backend: str = "local",
    backend_options: dict[str, Any] | None = None,
) -> ProbeRun:
    """Run ``harness`` on ``task`` (default: hello-file) with the engine playing ``replies``.

    ``model`` is a registry name or a HF directory (:func:`resolve_model`).
    ``judge_replies``: a scripted judge engine (``--judge-engine``, so also the simulated
    user's) playing these, in the order the rollout's judge and user calls come. ``backend``
    names the sandbox backend (``backend_options`` go to it; the local one's root is under
    ``work``)."""
    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.roles import RoleEngine
    from openforge.gateway.server import Gateway
    from openforge.rollouts.orchestrator import run_rollouts
    from openforge.store.schemas import CallRole
    from openforge.store.sqlite import SqliteStore

    model = resolve_model(str(model))
    work.mkdir(parents=True, exist_ok=True)
    script = work / "script.jsonl"
    script.write_bytes(b"\n".join(orjson.dumps(r) for r in replies) + b"\n")
    engine = ScriptedEngine.for_model(script, model, max_context=max_context)
    reply_ids = [engine.reply_ids(i) for i in range(len(replies))]
    roles: dict[CallRole, RoleEngine] = {}
    if judge_replies:
        judge_script = work / "judge.jsonl"
        judge_script.write_bytes(b"\n".join(orjson.dumps(r) for r in judge_replies) + b"\n")
        judge = RoleEngine(ScriptedEngine.for_model(judge_script, model), str(model))
        roles = {CallRole.JUDGE: judge, CallRole.USER: judge}
    store = SqliteStore(work / "store.db")
    async with Gateway(engine, store, model=model, roles=roles) as gw:
        config = RolloutConfig(
            tasks=[task or hello_task()],
            harness=harness,
            gateway_url=gw.control_url,
            n=1,
            concurrency=1,
            retries=0,
            retry_backoff_s=0.0,
            out_dir=work / "run",
            backend=backend,
            backend_options=backend_options or {"root": work / "sandboxes"},
            metadata=metadata or {},
            admin_token=gw.admin_token,
        )
        (result,) = await run_rollouts(config)
        rollout, calls = None, []
        if result.rollout_id:
            rollout = await store.get_rollout(result.rollout_id)
            calls = await store.calls(result.rollout_id, tokens=True)
    return ProbeRun(
        result=result, calls=list(calls), rollout=rollout, reply_ids=reply_ids, run_dir=work / "run"
    )
