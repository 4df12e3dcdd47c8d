"""Judge and simulated-user keys: a real gateway (SQLite and PostgreSQL stores) with a
scripted policy engine and scripted judge and user engines, reached through the openai SDK;
then ``openforge traces`` on the store it wrote."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from openforge.cli import app
from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.launch import role_engines
from openforge.gateway.roles import RoleEngine
from openforge.gateway.server import Gateway
from openforge.store.location import open_store
from openforge.store.schemas import CallRole

from .conftest import MODEL, TOOL_SCRIPT, write_script

JUDGE_REPLY = '{"score": 0.75, "reasoning": "mostly right"}'
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def _gateway(tmp_path: Path, location: str, user: bool = True) -> Gateway:
    policy = ScriptedEngine.for_model(write_script(tmp_path / "p.jsonl", TOOL_SCRIPT), MODEL)
    judge = ScriptedEngine.for_model(
        write_script(tmp_path / "j.jsonl", [{"text": JUDGE_REPLY}]), MODEL
    )
    roles = {CallRole.JUDGE: RoleEngine(judge, MODEL)}
    if user:
        simulated = ScriptedEngine.for_model(
            write_script(tmp_path / "u.jsonl", [{"text": "Thanks! [DONE]"}]), MODEL
        )
        roles[CallRole.USER] = RoleEngine(simulated, MODEL)
    return Gateway.at_store(policy, location, model=MODEL, roles=roles)


async def _admin(gw: Gateway, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(headers=gw.admin_headers) as c:
        return await c.post(gw.admin_url + path, json=body)


def _client(entry: dict[str, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=entry["openai_base_url"], api_key="x", max_retries=0)


async def _policy_turns(client: openai.AsyncOpenAI) -> None:
    """The agent: a tool call, its result, the final answer (one token path)."""
    messages: list[Any] = [{"role": "user", "content": "Say hi with bash."}]
    first = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "hi"})
    await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)


async def test_role_keys_reach_their_engines_and_are_recorded(
    tmp_path: Path, location: str
) -> None:
    async with _gateway(tmp_path, location) as gw:
        resp = await _admin(gw, "/rollouts", {"task_id": "t", "roles": ["judge", "user"]})
        assert resp.status_code == 201, resp.text
        minted = resp.json()
        judge, user = minted["role_keys"]["judge"], minted["role_keys"]["user"]
        assert len({minted["key"], judge["key"], user["key"]}) == 3
        assert judge["model"] and judge["openai_base_url"].endswith(f"/r/{judge['key']}/v1")
        asked: list[Any] = [{"role": "user", "content": "Score this transcript."}]
        async with _client(minted) as policy, _client(judge) as jc, _client(user) as uc:
            messages: list[Any] = [{"role": "user", "content": "Say hi with bash."}]
            first = await policy.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
            # The judge and the simulated user answer in between, from their own engines.
            verdict = await jc.chat.completions.create(model=judge["model"], messages=asked)
            assert verdict.choices[0].message.content == JUDGE_REPLY
            said = await uc.chat.completions.create(model="u", messages=asked)
            assert said.choices[0].message.content == "Thanks! [DONE]"
            # The pause of a weight update holds the policy, not the judge.
            assert (await _admin(gw, "/pause?wait=0", {})).status_code == 200
            again = await jc.chat.completions.create(model="j", messages=asked)
            assert again.choices[0].message.content == JUDGE_REPLY
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "hi"})
            held = asyncio.create_task(
                policy.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            )
            await asyncio.sleep(0.3)
            assert not held.done()
            await _admin(gw, "/resume", {})
            await held
        detail = await gw.apps.service.store.calls(minted["rollout_id"])
        assert [(c.seq, c.role) for c in detail] == [
            (0, CallRole.POLICY),
            (1, CallRole.JUDGE),
            (2, CallRole.USER),
            (3, CallRole.JUDGE),
            (4, CallRole.POLICY),
        ]
        # Each role renders with its own history: the agent's second call extends its
        # first although the judge and the user were called in between.
        assert not detail[4].fork and detail[4].prompt_ids[: len(detail[0].prompt_ids)] == (
            detail[0].prompt_ids
        )


async def test_mint_refusals_and_finished_keys(tmp_path: Path, location: str) -> None:
    async with _gateway(tmp_path, location, user=False) as gw:
        bad = await _admin(gw, "/rollouts", {"roles": ["teacher"]})
        assert bad.status_code == 400 and "not one of judge, user" in bad.text
        minted = (await _admin(gw, "/rollouts", {})).json()
        assert minted["role_keys"] == {}
        rid = minted["rollout_id"]
        none = await _admin(gw, f"/rollouts/{rid}/keys", {"role": "user"})
        assert none.status_code == 400 and "no user engine" in none.text
        judge = (await _admin(gw, f"/rollouts/{rid}/keys", {"role": "judge"})).json()
        missing = await _admin(gw, "/rollouts/ro_missing/keys", {"role": "judge"})
        assert missing.status_code == 404
        finish = {"status": "completed", "reward": 1.0}
        assert (await _admin(gw, f"/rollouts/{rid}/finish", finish)).status_code == 200
        late = await _admin(gw, f"/rollouts/{rid}/keys", {"role": "judge"})
        assert late.status_code == 409
        async with _client(judge) as jc:
            with pytest.raises(openai.PermissionDeniedError):
                await jc.chat.completions.create(
                    model="j", messages=[{"role": "user", "content": "hi"}]
                )


async def test_a_failing_judge_engine_is_an_error_not_an_answer(tmp_path: Path) -> None:
    """A judge engine that cannot be reached answers the grader's call with a 503 (its
    client then fails: the rollout's infra_error), recorded as the judge's engine_error."""

    def fail(message: str) -> None:
        raise AssertionError(message)

    # Nothing listens on port 9 (discard) here: the upstream request is refused.
    roles = role_engines("upstream:http://127.0.0.1:9/v1?served=org/judge-1", None, MODEL, fail)
    policy = ScriptedEngine.for_model(write_script(tmp_path / "p.jsonl", TOOL_SCRIPT), MODEL)
    async with Gateway.at_store(policy, tmp_path / "s.db", model=MODEL, roles=roles) as gw:
        minted = (await _admin(gw, "/rollouts", {"roles": ["judge"]})).json()
        judge = minted["role_keys"]["judge"]
        assert judge["model"] == "org/judge-1"  # a server's model name is kept whole
        async with _client(judge) as jc:
            with pytest.raises(openai.APIStatusError) as err:
                await jc.chat.completions.create(
                    model=judge["model"], messages=[{"role": "user", "content": "Score."}]
                )
        assert err.value.status_code == 503
        (call,) = await gw.apps.service.store.calls(minted["rollout_id"])
        assert call.role is CallRole.JUDGE and call.status == "engine_error"


def test_judge_engine_spec_errors_name_the_option() -> None:
    messages: list[str] = []

    def fail(message: str) -> None:
        messages.append(message)
        raise SystemExit(2)

    for spec in (
        "gpt4",
        "scripted",
        "vllm",
        "local?temperature=1",
        "upstream:http://h?max_context=x",
    ):
        with pytest.raises(SystemExit):
            role_engines(spec, None, MODEL, fail)
    assert all(m.startswith("--judge-engine ") for m in messages), messages
    assert "unknown engine kind 'gpt4'" in messages[0]
    assert "scripted:FILE" in messages[1] and "vllm:URL" in messages[2]
    assert "'temperature=1'" in messages[3] and "max_context" in messages[4]


async def _record_a_judged_rollout(tmp_path: Path, location: str) -> tuple[str, list[Any]]:
    async with _gateway(tmp_path, location) as gw:
        minted = await _admin(gw, "/rollouts", {"group_id": "g", "roles": ["judge", "user"]})
        body = minted.json()
        asked: list[Any] = [{"role": "user", "content": "Score this transcript."}]
        judge, user = body["role_keys"]["judge"], body["role_keys"]["user"]
        async with _client(body) as pc, _client(judge) as jc, _client(user) as uc:
            await _policy_turns(pc)
            await uc.chat.completions.create(model="u", messages=asked)
            await jc.chat.completions.create(model="j", messages=asked)
        finish = {"status": "completed", "reward": 1.0}
        assert (await _admin(gw, f"/rollouts/{body['rollout_id']}/finish", finish)).is_success
    store = open_store(location)
    calls = await store.calls(body["rollout_id"])
    await store.close()
    return body["rollout_id"], calls


def test_traces_never_export_judge_or_user_calls(tmp_path: Path) -> None:
    """A real store with an agent's path and a judge's and user's calls: the veRL, SFT and
    JSONL exports hold the agent's tokens only; ``traces stats`` and ``show`` list them
    apart."""
    location = str(tmp_path / "store.db")
    rollout_id, calls = asyncio.run(_record_a_judged_rollout(tmp_path, location))
    serving = {c.id for c in calls if c.role in (CallRole.JUDGE, CallRole.USER)}
    policy_ids = {c.id for c in calls} - serving
    assert len(serving) == 2 and len(policy_ids) == 2
    judge_tokens = next(c for c in calls if c.role is CallRole.JUDGE).output_ids
    runner = CliRunner()
    for fmt, mode in (("verl", "merged"), ("verl", "per_call"), ("sft", "merged")):
        out = tmp_path / f"{fmt}-{mode}.{'parquet' if fmt == 'verl' else 'jsonl'}"
        args = ["traces", "export", "--store", location, "--format", fmt, "--mode", mode]
        result = runner.invoke(app, [*args, "--out", str(out)])
        assert result.exit_code == 0, result.output
        if fmt == "verl":
            rows = pq.read_table(out).to_pylist()
            assert len(rows) == (1 if mode == "merged" else 2)
            assert {i for r in rows for i in r["call_ids"]} <= policy_ids
            assert all(r["responses"][-len(judge_tokens) :] != judge_tokens for r in rows)
        else:
            text = out.read_text()
            assert JUDGE_REPLY.replace('"', '\\"') not in text and "[DONE]" not in text
            assert "Score this transcript" not in text
    out = tmp_path / "plans.jsonl"
    result = runner.invoke(app, ["traces", "export", "--store", location, "--format", "jsonl",
                                 "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    (plan,) = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {s["role"] for s in plan["serving_calls"]} == {"judge", "user"}
    assert {n["call_id"] for n in plan["nodes"]} == policy_ids
    stats = runner.invoke(app, ["traces", "stats", "--store", location])
    assert "judge calls (never samples)" in stats.output and "user calls" in stats.output
    show = runner.invoke(app, ["traces", "show", rollout_id, "--store", location])
    assert show.exit_code == 0, show.output
    assert "judge and simulated-user calls (never trained)" in show.output
    assert "judge call #" in show.output and "user call #" in show.output


async def test_the_cli_gateway_a_training_run_starts_serves_the_judge(tmp_path: Path) -> None:
    """``openforge gateway --engine local --judge-engine scripted:FILE`` as a training run
    starts it (``judge_engine`` in the config): the judge answers, and the user shares it."""
    from openforge.training.session import gateway_process

    script = write_script(tmp_path / "j.jsonl", [{"text": JUDGE_REPLY}])
    spawned = gateway_process(
        Path(MODEL), tmp_path / "s.db", threads=1, judge_engine=f"scripted:{script}"
    )
    async with spawned as (url, token):
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
            status = (await http.get(url + "/admin/status")).json()
            assert set(status["roles"]) == {"judge", "user"}
            assert status["roles"]["judge"]["kind"] == "scripted"
            minted = (await http.post(url + "/admin/rollouts", json={"roles": ["user"]})).json()
        async with _client(minted["role_keys"]["user"]) as uc:
            said = await uc.chat.completions.create(
                model="u", messages=[{"role": "user", "content": "Your turn."}]
            )
    assert said.choices[0].message.content == JUDGE_REPLY


def test_a_config_cannot_give_engines_to_a_gateway_it_does_not_start() -> None:
    from openforge.training.config import ConfigError, TrainConfig

    with pytest.raises(ConfigError, match="judge_engine"):
        TrainConfig(judge_engine="scripted:j.jsonl", gateway_url="http://h:1", store="s.db")
