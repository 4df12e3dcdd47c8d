"""Against real checkouts of the published suites, when the user points at them:
``OPENFORGE_CLAWEVAL_ROOT`` (claw-eval/claw-eval) and ``OPENFORGE_QWENCLAWBENCH_ROOT``
(SKYLENAGE-AI/QwenClawBench). Every task loads; for several tasks a hand-written trajectory
and a no-op score through OpenForge exactly what the suite's own grader gives the same
trajectory when called directly (in a child process, from the checkout)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from openforge.environments.services import AUDIT_FILE, DISPATCH_LOG, TaskServices
from openforge.harnesses.claw import ClawHarness
from openforge.sandboxes import SandboxBackend, create_backend
from openforge.sandboxes.base import SandboxSpec
from openforge.store.location import open_store
from openforge.suites import load_tasks
from openforge.suites.claweval.grader import ClawEvalUser
from openforge.tasks.grading import GradeInput
from openforge.tasks.judge import Judge
from openforge.tasks.model import Task

from .judge import judge_endpoint

CLAWEVAL = os.environ.get("OPENFORGE_CLAWEVAL_ROOT", "")
QCB = os.environ.get("OPENFORGE_QWENCLAWBENCH_ROOT", "")
needs_claweval = pytest.mark.skipif(
    not CLAWEVAL, reason="OPENFORGE_CLAWEVAL_ROOT does not point at a claw-eval checkout"
)
needs_qcb = pytest.mark.skipif(
    not QCB, reason="OPENFORGE_QWENCLAWBENCH_ROOT does not point at a QwenClawBench checkout"
)
# Each suite's judge answers in the shape its prompt asks for.
QCB_JUDGE = json.dumps({"scores": {"quality": 0.6}, "total": 0.6, "notes": "ok"})
CLAWEVAL_JUDGE = json.dumps({"score": 0.6, "reasoning": "ok"})


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[SandboxBackend]:
    b = create_backend("local", root=tmp_path / "sandboxes")
    yield b
    await b.close()


async def _direct(checkout: Path, script: str, payload: dict[str, Any], env: dict[str, str]) -> Any:
    """Run ``script`` with the checkout's code on the path; its last stdout line as JSON.

    Asynchronous: the judge it may call is served by this test's own event loop."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        cwd=checkout,
        env={**os.environ, **env},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), 600)
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.splitlines()[-1])


async def _ours(
    backend: SandboxBackend,
    task: Task,
    files: dict[str, bytes],
    transcript: dict[str, Any],
    call: tuple[str, dict[str, Any]] | None = None,
    judge: Judge | None = None,
) -> tuple[float, dict[str, Any], list[dict[str, Any]]]:
    """Our score, and what the task's services recorded: their audits and, when ``call``
    names a tool, its dispatch through the MCP bridge (made with the services up)."""
    assert task.grader is not None
    box = await backend.create(SandboxSpec(network="none"))
    try:
        await box.put({**task.workspace_bytes(), **files})
        audits: dict[str, Any] = {}
        dispatches: list[dict[str, Any]] = []
        if task.sidecars is not None and task.mcp is not None:
            await task.sidecars.prepare(box)
            argv = ["true"]
            if call is not None:
                bridge = " ".join(shlex.quote(a) for a in (*task.mcp.call, call[0]))
                argv = ["sh", "-c", f"echo {shlex.quote(json.dumps(call[1]))} | {bridge}"]
            res = await box.exec(task.sidecars.wrap(argv), timeout=120)
            assert res.exit_code == 0, res.stderr.decode()[-3000:]
            got = await box.get([AUDIT_FILE, DISPATCH_LOG])
            audits = json.loads(got[AUDIT_FILE])
            dispatches = [json.loads(x) for x in got.get(DISPATCH_LOG, b"").splitlines()]
        given = GradeInput(box, "/workspace", ClawHarness.decode(transcript), judge)
        score = (await task.grader.grade(given)).reward
        return score, audits, dispatches
    finally:
        await box.close()


BASH = ("bash", {"command": "ls -la"})


def _chat(
    prompt: str,
    answer: str | None,
    tool: tuple[str, dict[str, Any]] = BASH,
    result: str = "total 0",
) -> dict[str, Any]:
    """A claw transcript: one tool call, then the answer (None: a no-op)."""
    if answer is None:
        return {"messages": [{"role": "user", "content": prompt}]}
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": tool[0], "arguments": json.dumps(tool[1])},
    }
    return {
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
            {"role": "assistant", "content": answer},
        ]
    }


# --------------------------------------------------------------------------- QwenClawBench

QCB_DIRECT = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, "scripts")
from lib_tasks import TaskLoader
from lib_grading import grade_task
req = json.load(sys.stdin)
task = TaskLoader(Path(req["tasks_dir"])).load_task(Path(req["file"]))
r = grade_task(task=task, skill_dir=Path("."), judge_model="judge",
               execution_result={"status": "success", "transcript": req["transcript"],
                                 "workspace": req["workspace"]})
print(json.dumps(r.to_dict()))
"""


def _openclaw_events(prompt: str, answer: str | None) -> list[dict[str, Any]]:
    """The same trajectory as :func:`_chat`, as OpenClaw's session events (by hand)."""
    events = [
        {
            "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}]},
        }
    ]
    if answer is None:
        return events
    call = {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "ls -la"}}
    events += [
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "Let me look."}, call],
            },
        },
        {
            "type": "message",
            "message": {
                "role": "toolResult",
                "toolCallId": "c1",
                "toolName": "bash",
                "content": [{"type": "text", "text": "total 0"}],
                "isError": False,
            },
        },
        {
            "type": "message",
            "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        },
    ]
    return events


def _largest_file_solution(task: Task) -> tuple[dict[str, bytes], str]:
    """A correct run of the largest-text-file task, written from its own assets."""
    text_like = [
        p for p in task.workspace if p.endswith((".csv", ".yaml", ".sh", ".json", ".txt", ".log"))
    ]
    sizes = {Path(p).name: task.workspace[p].stat().st_size for p in text_like}
    winner = max(sizes, key=sizes.__getitem__)
    listing = "\n".join(f"{name}: {size} bytes" for name, size in sorted(sizes.items()))
    report = f"Largest text-like file: {winner} ({sizes[winner]} bytes)\n\nCandidates:\n{listing}\n"
    answer = (
        f"The largest text-like file in downloads is {winner} at {sizes[winner]} bytes. "
        "Binary files (pdf, zip, png) were excluded. The report is in "
        "downloads/text_file_size_report.txt."
    )
    return {"downloads/text_file_size_report.txt": report.encode()}, answer


@needs_qcb
def test_every_qwenclawbench_task_loads() -> None:
    got = load_tasks(f"qwenclawbench:{QCB}")
    assert not got.errors, got.errors
    files = list(Path(QCB).glob("data/*/tasks/task_*.md")) or list(
        Path(QCB).glob("tasks/task_*.md")
    )
    assert len(got.tasks) == len(files) > 0
    print("qwenclawbench", len(got.tasks), dict(Counter(t.category for t in got.tasks)))


@needs_qcb
async def test_qwenclawbench_scores_agree_with_lib_grading(
    backend: SandboxBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = load_tasks(f"qwenclawbench:{QCB}").tasks
    picked = [t for t in tasks if "largest_file" in t.id][:1] + [
        t for t in tasks if t.workspace_extra
    ][:2]
    picked += [t for t in tasks if t not in picked][: 6 - len(picked)]
    rows = []
    async with judge_endpoint(tmp_path / "judge", QCB_JUDGE, monkeypatch) as base:
        env = {"JUDGE_BASE_URL": base, "JUDGE_API_KEY": os.environ["OPENFORGE_JUDGE_API_KEY"]}
        for task in picked:
            files, answer = (
                _largest_file_solution(task)
                if "largest_file" in task.id
                else ({"NOTES.md": b"Work done.\n"}, "I have completed the task as asked.")
            )
            for name, written, said in (("worked", files, answer), ("no-op", {}, None)):
                ours, _, _ = await _ours(backend, task, written, _chat(task.instruction, said))
                with tempfile.TemporaryDirectory() as ws:
                    for rel, data in {**task.workspace_bytes(), **written}.items():
                        (Path(ws) / rel).parent.mkdir(parents=True, exist_ok=True)
                        (Path(ws) / rel).write_bytes(data)
                    payload = {
                        "tasks_dir": str(Path(task.path).parent),
                        "file": str(task.path),
                        "workspace": ws,
                        "transcript": _openclaw_events(task.instruction, said),
                    }
                    theirs = (await _direct(Path(QCB), QCB_DIRECT, payload, env))["score"]
                rows.append((task.id, name, ours, theirs))
    print("\n".join(f"{t} {n}: ours {a:.4f} lib_grading {b:.4f}" for t, n, a, b in rows))
    assert all(a == pytest.approx(b) for _, _, a, b in rows), rows
    assert rows[0][2] > rows[1][2]  # the hand-written solution beats the no-op


# --------------------------------------------------------------------------- ClawEval

CLAWEVAL_DIRECT = """
import json, sys
sys.path.insert(0, "src")
from claw_eval.graders.registry import get_grader
from claw_eval.graders.llm_judge import LLMJudge
from claw_eval.models.scoring import compute_task_score
from claw_eval.models.task import TaskDefinition
from claw_eval.trace.reader import load_trace
req = json.load(sys.stdin)
task = TaskDefinition.from_yaml(req["task_yaml"])
_, messages, dispatches, media, _, audit = load_trace(req["trace"])
grader = get_grader(task.task_id, tasks_dir="tasks", task_dir=req["task_dir"])
judge = LLMJudge(model_id="judge", api_key=req["key"], base_url=req["base"])
scores = grader.grade(messages, dispatches, task, audit_data=audit, judge=judge,
                      media_events=media)
print(json.dumps({"task_score": compute_task_score(scores)}))
"""

CLAWEVAL_ANSWERS = {
    "M100_su7_price_from_image": "This is a Xiaomi SU7. A new SU7 sells for about 215,900 to "
    "299,900 yuan depending on the trim (Standard, Pro, Max); used ones sell for less.",
    "M101_chinese_food_identification_zh": "图中的菜是宫保鸡丁，一道经典川菜。",
    "T091_pinbench_humanize_blog": (
        "Let's be honest: you don't need another productivity hack. You need a few habits "
        "that stick. Start by choosing your priorities each morning, and it's fine if "
        "there are only three. Block distractions: close the tabs you won't use and put the "
        "phone in another room. Use time blocks for deep work, and take a real break "
        "between them. We're not machines, and work-life balance isn't a luxury. "
    )
    * 4,
}


def _claweval_trace(
    task_id: str,
    prompt: str,
    answer: str | None,
    audits: dict[str, Any],
    dispatches: list[dict[str, Any]],
    tool: tuple[str, dict[str, Any]] = BASH,
    result: str = "total 0",
) -> list[dict[str, Any]]:
    """The same trajectory as :func:`_chat`, as a ClawEval trace (by hand)."""
    t = "direct"

    def msg(role: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {"type": "message", "trace_id": t, "message": {"role": role, "content": content}}

    events = [
        {"type": "trace_start", "trace_id": t, "task_id": task_id, "model": "m"},
        msg("user", [{"type": "text", "text": prompt}]),
    ]
    if answer is not None:
        events += [
            msg(
                "assistant",
                [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "c1", "name": tool[0], "input": tool[1]},
                ],
            ),
            msg(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "text", "text": result}],
                        "is_error": False,
                    }
                ],
            ),
            msg("assistant", [{"type": "text", "text": answer}]),
        ]
    events += [
        {"type": "tool_dispatch", "trace_id": t, **d, "tool_use_id": "c1"} for d in dispatches
    ]
    events += [
        {
            "type": "audit_snapshot",
            "trace_id": t,
            "service_name": name,
            "audit_url": a["url"],
            "audit_data": a["data"],
        }
        for name, a in audits.items()
    ]
    return [*events, {"type": "trace_end", "trace_id": t}]


@needs_claweval
def test_every_claweval_task_loads_or_names_its_missing_fixture() -> None:
    got = load_tasks(f"claweval:{CLAWEVAL}")
    dirs = [d for d in (Path(CLAWEVAL) / "tasks").iterdir() if (d / "task.yaml").is_file()]
    assert len(got.tasks) + len(got.errors) == len(dirs)
    # The GitHub checkout lacks large fixtures (videos; published on Hugging Face): those
    # tasks are errors naming the file, never tasks with an empty workspace.
    fixtures = ("sandbox_files", "sandbox_grader_files", "services")
    odd = [
        str(e)
        for e in got.errors
        if "not found" not in e.problem or not e.field.startswith(fixtures)
    ]
    assert not odd, odd
    print(
        "claweval",
        len(got.tasks),
        "loaded,",
        len(got.errors),
        "missing fixtures;",
        dict(Counter(t.split for t in got.tasks)),
    )


@needs_claweval
async def test_claweval_scores_agree_with_its_grader(
    backend: SandboxBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    by = load_tasks(f"claweval:{CLAWEVAL}").by_id()
    named = (*CLAWEVAL_ANSWERS, "M099_su7_price_from_image_zh", "T070zh_js_async_generator_trace")
    plain = [by[t] for t in named if t in by]
    # Services tasks whose services are all local mocks (web_real calls the internet), with
    # a tool that takes no required arguments for the worked trajectory to call.
    served = [
        t
        for t in by.values()
        if isinstance(t.sidecars, TaskServices)
        and t.mcp is not None
        and t.split == "general"
        and "web_real" not in json.dumps([s.command for s in t.sidecars.services])
        and any(not x.input_schema.get("required") for x in t.mcp.tools)
    ]
    picked = plain[:5] + served[:5]
    assert len(picked) >= 5, sorted(by)
    rows = []
    async with judge_endpoint(tmp_path / "judge", CLAWEVAL_JUDGE, monkeypatch) as base:
        key = os.environ["OPENFORGE_JUDGE_API_KEY"]
        for task in picked:
            answer = CLAWEVAL_ANSWERS.get(task.id, "Done: I checked and handled everything.")
            tool: tuple[str, dict[str, Any]] = BASH
            if task.mcp is not None:
                tool = (
                    next(x.name for x in task.mcp.tools if not x.input_schema.get("required")),
                    {},
                )
            for name, said in (("worked", answer), ("no-op", None)):
                call = tool if said is not None and task.mcp is not None else None
                # The tool's answer (its dispatch's response) is what the model saw.
                ours, audits, dispatches = await _ours(backend, task, {}, {"messages": []}, call)
                result = (
                    json.dumps(dispatches[0]["response_body"], ensure_ascii=False)
                    if dispatches
                    else "total 0"
                )
                transcript = _chat(task.instruction, said, tool, result)
                ours, audits, dispatches = await _ours(backend, task, {}, transcript, call)
                trace = tmp_path / f"{task.id}-{name}.jsonl"
                events = _claweval_trace(
                    task.id, task.instruction, said, audits, dispatches, tool, result
                )
                trace.write_text("".join(json.dumps(e) + "\n" for e in events))
                payload = {
                    "task_yaml": str(task.path / "task.yaml"),
                    "task_dir": str(task.path),
                    "trace": str(trace),
                    "base": base,
                    "key": key,
                }
                theirs = (await _direct(Path(CLAWEVAL), CLAWEVAL_DIRECT, payload, {}))["task_score"]
                rows.append((task.id, name, ours, theirs))
    print("\n".join(f"{t} {n}: ours {a:.4f} claw_eval {b:.4f}" for t, n, a, b in rows))
    assert all(a == pytest.approx(b) for _, _, a, b in rows), rows


# ClawEval's multi_turn split: the suite's own UserAgent on a user-role key, then its grader
# with the judge on a judge-role key, against the grader called directly.
USER_REPLY = "我也不太清楚具体数字，大概就是这些情况。"


def _multi_turn(prompt: str, asked: str, reply: str | None, answer: str) -> dict[str, Any]:
    """A claw transcript of a clarifying conversation (None: the first turn only)."""
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": asked}]
    if reply is not None:
        messages += [
            {"role": "user", "content": "[user_agent]\n" + reply},
            {"role": "assistant", "content": answer},
        ]
    return {"messages": messages}


def _multi_turn_trace(
    task_id: str, transcript: dict[str, Any], audits: dict[str, Any]
) -> list[dict[str, Any]]:
    t = "direct"
    events: list[dict[str, Any]] = [
        {"type": "trace_start", "trace_id": t, "task_id": task_id, "model": "m"}
    ]
    for m in transcript["messages"]:
        content = [{"type": "text", "text": m["content"]}]
        message = {"role": m["role"], "content": content}
        events.append({"type": "message", "trace_id": t, "message": message})
    events += [
        {
            "type": "audit_snapshot",
            "trace_id": t,
            "service_name": name,
            "audit_url": a["url"],
            "audit_data": a["data"],
        }
        for name, a in audits.items()
    ]
    return [*events, {"type": "trace_end", "trace_id": t}]


def _role_gateway(tmp_path: Path) -> Any:
    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.roles import RoleEngine
    from openforge.gateway.server import Gateway
    from openforge.models.registry import DEFAULT_MODEL, models_dir
    from openforge.store.schemas import CallRole

    model = str(models_dir() / DEFAULT_MODEL)

    def engine(name: str, text: str) -> ScriptedEngine:
        script = tmp_path / f"{name}.jsonl"
        script.write_text(json.dumps({"text": text}) + "\n")
        return ScriptedEngine.for_model(script, model)

    roles = {
        CallRole.JUDGE: RoleEngine(engine("judge", CLAWEVAL_JUDGE), model),
        CallRole.USER: RoleEngine(engine("user", USER_REPLY), model),
    }
    return Gateway(engine("policy", "unused"), open_store(tmp_path / "s.db"), model=model,
                   roles=roles)  # fmt: skip


@needs_claweval
async def test_claweval_multi_turn_user_and_grader_agree(
    backend: SandboxBackend, tmp_path: Path
) -> None:
    talks = load_tasks(f"claweval:{CLAWEVAL}", split="multi_turn").tasks
    # Those whose services are local mocks: the others (35 of 38 in the published checkout)
    # search the real web through web_real, which needs the internet and a SERP key.
    tasks = [
        t
        for t in talks
        if not isinstance(t.sidecars, TaskServices)
        or "web_real" not in json.dumps([s.command for s in t.sidecars.services])
    ][:5]
    print("claweval multi_turn:", len(talks), "tasks,", len(tasks), "picked (no web_real)")
    assert len(tasks) >= 3
    rows = []
    gateway = _role_gateway(tmp_path)
    async with gateway as gw, httpx.AsyncClient(headers=gw.admin_headers) as http:
        for task in tasks:
            assert isinstance(task.simulated_user, ClawEvalUser) and task.max_turns
            minted = (
                await http.post(gw.admin_url + "/rollouts", json={"roles": ["judge", "user"]})
            ).json()
            keys = minted["role_keys"]
            user = Judge(keys["user"]["openai_base_url"], keys["user"]["key"], "user")
            judge = Judge(keys["judge"]["openai_base_url"], keys["judge"]["key"], "judge")
            asked = "请问您的具体情况是怎样的？"
            first = _multi_turn(task.instruction, asked, None, "")
            reply = await task.simulated_user.reply(ClawHarness.decode(first), user)
            assert reply == "[user_agent]\n" + USER_REPLY
            (call,) = await gw.store.calls(minted["rollout_id"])
            said = json.dumps(call.conversation, ensure_ascii=False)
            persona = task.simulated_user.persona.strip().splitlines()[0]
            assert persona in said and asked in said  # the suite's own user prompt
            answer = "根据您的情况，我建议先保留应急资金，再按计划执行。"
            for name, transcript in (
                ("talked", _multi_turn(task.instruction, asked, USER_REPLY, answer)),
                ("no-op", {"messages": [{"role": "user", "content": task.instruction}]}),
            ):
                ours, audits, _ = await _ours(backend, task, {}, transcript, None, judge)
                trace = tmp_path / f"{task.id}-{name}.jsonl"
                events = _multi_turn_trace(task.id, transcript, audits)
                trace.write_text("".join(json.dumps(e) + "\n" for e in events))
                payload = {
                    "task_yaml": str(task.path / "task.yaml"),
                    "task_dir": str(task.path),
                    "trace": str(trace),
                    "base": judge.base_url,
                    "key": judge.api_key,
                }
                theirs = (await _direct(Path(CLAWEVAL), CLAWEVAL_DIRECT, payload, {}))["task_score"]
                rows.append((task.id, name, ours, theirs))
    print("\n".join(f"{t} {n}: ours {a:.4f} claw_eval {b:.4f}" for t, n, a, b in rows))
    assert all(a == pytest.approx(b) for _, _, a, b in rows), rows
