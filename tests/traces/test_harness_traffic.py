"""Real harness traffic: rollouts recorded by the gateway, exported to both sample forms.

Claude Code and Codex run through the real orchestrator, bubblewrap sandbox and an
in-process gateway (scripted engine, SQLite store) via ``probing.probe``; their recorded
calls must give the same sampled tokens in ``per_call`` and ``merged`` form, train each
sampled token exactly once, and export to veRL and SFT. A history edit must fork: OpenClaw
does it on every call (it moves its injected internal-context turn to the end of history),
and an OpenAI SDK client against a gateway does it deterministically here, together with a
drifted assistant turn (sampled ids that re-tokenize differently).
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from openforge.cli import app
from openforge.engines.scripted import ScriptedEngine, ScriptedReply, load_script
from openforge.gateway.server import Gateway
from openforge.harnesses.registry import get_harness
from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.probing.probe import SOLUTIONS, ProbeRun, probe
from openforge.rendering.renderer import Renderer
from openforge.rendering.tokenizer import load_tokenizer
from openforge.store.schemas import CallRecord, CallStatus, Rollout, RolloutStatus
from openforge.store.sqlite import SqliteStore
from openforge.traces.export import verl_table, write_sft
from openforge.traces.graph import DriftKind
from openforge.traces.samples import Mode, RolloutPlan, TraceOptions, plan_rollout

NEEDS = {
    "claude-code": "claude",
    "codex": "codex",
    "openclaw": "/opt/openforge/openclaw/bin/openclaw",
}
runner = CliRunner()
MODEL = models_dir() / DEFAULT_MODEL


def _missing(name: str) -> str | None:
    """What the setup script should have installed for harness ``name`` and did not (None: all)."""
    if not MODEL.is_dir():
        return f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed: the setup script installs it"
    if shutil.which(NEEDS[name]) is None:
        return (
            f"{name} is not installed ({NEEDS[name]} not found): run scripts/install-harnesses.sh"
        )
    return None


def _cli(*args: str) -> str:
    result = runner.invoke(app, ["traces", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ProbeRun]:
    """``recorded(NAME)``: Claude Code's or Codex's solved hello-file rollout.

    The available ones run once per module, at the same time (start-up overlaps)."""
    names = [n for n in ("claude-code", "codex") if _missing(n) is None]
    work = tmp_path_factory.mktemp("harness-traffic")

    async def run_all() -> list[ProbeRun]:
        return list(
            await asyncio.gather(*(probe(get_harness(n), SOLUTIONS[n], work / n) for n in names))
        )

    done = dict(zip(names, asyncio.run(run_all()), strict=True)) if names else {}

    def get(name: str) -> ProbeRun:
        why = _missing(name)
        if why is not None:
            pytest.fail(why)
        return done[name]

    return get


def _sampled(plan: RolloutPlan) -> Counter[tuple[str, int, int, float]]:
    """Every trained token as (call, position in its output, id, logprob)."""
    out: Counter[tuple[str, int, int, float]] = Counter()
    for s in plan.samples:
        for call_id, a, b in s.spans:
            for k in range(a, b):
                assert s.loss_mask[k] == 1
                out[(call_id, k - a, s.response_ids[k], s.logprobs[k])] += 1
    return out


def _check_both_forms(rollout: Rollout, calls: list[CallRecord]) -> tuple[RolloutPlan, RolloutPlan]:
    """per_call and merged hold the same sampled tokens; merged trains each exactly once."""
    per_call = plan_rollout(rollout, calls, TraceOptions(Mode.PER_CALL, require_reward=True))
    merged = plan_rollout(rollout, calls, TraceOptions(Mode.MERGED, require_reward=True))
    assert per_call.excluded is None and merged.excluded is None
    expected = Counter(
        (c.id, k, t, lp)
        for c in calls
        if c.status == CallStatus.OK
        for k, (t, lp) in enumerate(zip(c.output_ids, c.output_logprobs, strict=True))
    )
    assert _sampled(per_call) == _sampled(merged) == expected
    for s in merged.samples:  # nothing but sampled tokens is trained, observations carry 0.0
        assert sum(s.loss_mask) == sum(b - a for _, a, b in s.spans)
        assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if not m)
    return per_call, merged


def _check_verl(plan: RolloutPlan, out: Path) -> None:
    table = verl_table(plan.samples)
    pq.write_table(table, out)
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(plan.samples)
    for row, s in zip(rows, plan.samples, strict=True):
        assert row["input_ids"] == row["prompts"] + row["responses"] == s.input_ids
        assert row["response_mask"] == s.loss_mask
        assert row["rollout_log_probs"] == pytest.approx(s.logprobs, abs=1e-6)
        assert row["token_level_scores"][-1] == s.reward and row["uid"] == s.group_id


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_real_harness_rollout_exports(
    name: str, recorded: Callable[[str], ProbeRun], tmp_path: Path
) -> None:
    run = recorded(name)
    assert run.rollout is not None and run.rollout.status == RolloutStatus.COMPLETED
    assert run.rollout.reward == 1.0
    per_call, merged = _check_both_forms(run.rollout, run.calls)
    graph = merged.graph
    # The main path: the scripted turns, in order, each trained once with the engine's ids.
    main = graph.paths()[0]
    assert [n.call.output_ids for n in main] == run.reply_ids
    assert all(n.drift == DriftKind.CLEAN for n in main) and graph.drift == []
    # Side calls (none with non-essential traffic off, as the adapters configure them) would
    # each start a root of their own, trained in a sample of their own.
    for root in graph.roots[1:]:
        assert root.drift == DriftKind.FORK
        assert any(s.call_ids[0] == root.call.id for s in merged.samples)
    assert len(merged.samples) == len(graph.roots)
    assert len(per_call.samples) == len(run.calls)
    assert per_call.counts.tokens / merged.counts.tokens > 1.5  # the long system prompt, once

    _check_verl(per_call, tmp_path / "per_call.parquet")
    _check_verl(merged, tmp_path / "merged.parquet")
    # The CLI reads the gateway's own store file the same way.
    store = str(run.run_dir.parent / "store.db")
    out = tmp_path / "cli.parquet"
    _cli("export", "--store", store, "--format", "verl", "--mode", "merged", "--out", str(out))
    assert pq.read_table(out).column("input_ids").to_pylist() == [
        s.input_ids for s in merged.samples
    ]

    sft = tmp_path / "sft.jsonl"
    assert write_sft([merged], sft) == len(run.calls)
    chats = [orjson.loads(x) for x in sft.read_bytes().splitlines()]
    tokens = [orjson.loads(x) for x in (tmp_path / "sft.tokens.jsonl").read_bytes().splitlines()]
    for chat, rec, call in zip(chats, tokens, run.calls, strict=True):
        assert chat["messages"][-1]["role"] == "assistant" and chat["tools"]
        assert rec["input_ids"] == call.prompt_ids + call.output_ids
        assert rec["loss_mask"] == [0] * len(call.prompt_ids) + [1] * len(call.output_ids)
    if run.calls[-1].completion.get("text"):
        assert chats[-1]["messages"][-1]["content"] == run.calls[-1].completion["text"]


@pytest.mark.slow
def test_openclaw_history_edit_forks_every_call(tmp_path: Path) -> None:
    why = _missing("openclaw")
    if why is not None:
        pytest.fail(why)
    run = asyncio.run(probe(get_harness("openclaw"), SOLUTIONS["openclaw"], tmp_path / "run"))
    assert run.rollout is not None and run.rollout.reward == 1.0
    assert len(run.calls) >= 2
    _, merged = _check_both_forms(run.rollout, run.calls)
    graph = merged.graph
    # Every call after the first rewrote history: each is a root with the gateway's reason.
    assert len(graph.roots) == len(run.calls) and merged.counts.forks == len(run.calls) - 1
    for root in graph.roots[1:]:
        assert root.drift == DriftKind.FORK and root.call.render_info.get("fork_reason")
    masked = plan_rollout(run.rollout, run.calls, TraceOptions(mask_forks=True))
    assert masked.counts.masked_calls == {"fork": len(run.calls) - 1}
    assert [s.call_ids for s in masked.samples] == [[graph.roots[0].call.id]]
    _check_verl(merged, tmp_path / "merged.parquet")


# -- a deterministic history edit and a drifted turn, through the OpenAI SDK ----------------


async def _edited_rollout(work: Path) -> str:
    """Three calls: a reply sampled one token per character (it re-tokenizes differently),
    a call re-sending it (drift, realigned), then one with the first user turn edited."""
    script = work / "script.jsonl"
    script.write_text('{"text": "Hello there, friend."}\n{"text": "Sure."}\n{"text": "Edited."}\n')
    tok = load_tokenizer(MODEL)
    end_id = Renderer(tok).end_id

    def char_by_char(reply: ScriptedReply) -> list[int]:
        return [i for ch in reply.text for i in tok.encode(ch)] + [end_id]

    engine = ScriptedEngine(load_script(script), char_by_char, model=str(MODEL))
    async with Gateway(engine, SqliteStore(work / "store.db"), model=MODEL) as gw:
        async with httpx.AsyncClient(headers=gw.admin_headers) as c:
            r = await c.post(gw.admin_url + "/rollouts", json={"task_id": "t", "group_id": "g"})
            rollout = r.json()
        client = openai.AsyncOpenAI(base_url=rollout["openai_base_url"], api_key="unused")
        try:
            msgs: list[Any] = [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Greet me."},
            ]
            for follow_up in ("Again.", "Once more."):
                answer = await client.chat.completions.create(model="m", messages=msgs)
                msgs += [
                    {"role": "assistant", "content": answer.choices[0].message.content},
                    {"role": "user", "content": follow_up},
                ]
                if follow_up == "Once more.":
                    msgs[1] = {"role": "user", "content": "Greet me politely."}
            await client.chat.completions.create(model="m", messages=msgs)
        finally:
            await client.close()
        async with httpx.AsyncClient(headers=gw.admin_headers) as c:
            done = await c.post(
                f"{gw.admin_url}/rollouts/{rollout['rollout_id']}/finish",
                json={"status": "completed", "reward": 1.0},
            )
            assert done.status_code == 200, done.text
    return str(rollout["rollout_id"])


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if not MODEL.is_dir():
        pytest.fail(f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it")
    work = tmp_path_factory.mktemp("edited")
    return work / "store.db", asyncio.run(_edited_rollout(work))


async def _load(store_path: Path, rollout_id: str) -> tuple[Rollout, list[CallRecord]]:
    store = SqliteStore(store_path)
    try:
        return await store.get_rollout(rollout_id), await store.calls(rollout_id)
    finally:
        await store.close()


def test_history_edit_forks_and_drift_is_reported(edited: tuple[Path, str]) -> None:
    store_path, rollout_id = edited
    rollout, calls = asyncio.run(_load(store_path, rollout_id))
    assert [c.fork for c in calls] == [False, False, True]
    _, merged = _check_both_forms(rollout, calls)
    graph = merged.graph
    assert [n.call.seq for n in graph.roots] == [0, 2]
    assert [(n.call.seq, n.drift) for n in graph.nodes] == [
        (0, DriftKind.CLEAN),
        (1, DriftKind.REALIGN),
        (2, DriftKind.FORK),
    ]
    assert merged.counts.forks == 1 and merged.counts.drift == len(graph.drift) >= 2
    assert [s.call_ids for s in merged.samples] == [[calls[0].id, calls[1].id], [calls[2].id]]

    masked = plan_rollout(rollout, calls, TraceOptions(mask_forks=True))
    assert masked.counts.masked_calls == {"fork": 1}
    assert [s.call_ids for s in masked.samples] == [[calls[0].id, calls[1].id]]

    stats = _cli("stats", "--store", str(store_path))
    assert "forks" in stats and "drifted turns" in stats
    shown = _cli("show", rollout_id, "--store", str(store_path), "--tokenizer", str(MODEL))
    assert "fork at call #2: message 1 (user) differs" in " ".join(shown.split())
    assert f"drift call {calls[1].id} (#1): message 2" in shown
    assert "Hello there, friend." in shown
