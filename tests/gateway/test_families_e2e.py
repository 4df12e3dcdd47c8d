"""A tool-call round trip through each model family's own format: the scripted engine
emits the family's tokens, the official OpenAI and Anthropic SDKs are the harness."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway_process import OPENFORGE, free_port
from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.tiny_families import TINY_FAMILIES, build_tiny_family
from openforge.rendering import load_tokenizer
from openforge.store.sqlite import SqliteStore

from .conftest import TOOL_SCRIPT, new_rollout, rollout_calls, write_script
from .test_sdks import TOOLS_ANT, TOOLS_OAI

# GLM's template closes no assistant turn with a token of its own: its replies fork.
_FORKS = {"glm45"}


@pytest.fixture(params=sorted(TINY_FAMILIES))
async def family_gateway(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, Gateway]]:
    name = str(request.param)
    model = build_tiny_family(name, tmp_path / name)
    script = write_script(tmp_path / "script.jsonl", TOOL_SCRIPT)
    engine = ScriptedEngine.for_model(script, model)
    async with Gateway(engine, SqliteStore(tmp_path / "store.db"), model=model) as gw:
        yield name, gw


async def test_openai_and_anthropic_round_trip_in_the_family_format(
    family_gateway: tuple[str, Gateway],
) -> None:
    name, gw = family_gateway
    # OpenAI Chat, not streamed.
    r = await new_rollout(gw)
    oai = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="ignored")
    msgs: list[Any] = [{"role": "user", "content": "run echo hi"}]
    first = await oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS_OAI)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "bash"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"command": "echo hi"}  # type: ignore[union-attr]
    msgs += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "hi"},
    ]
    second = await oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS_OAI)
    assert second.choices[0].message.content == "The command printed hi."
    await oai.close()
    rec = await rollout_calls(gw, r["rollout_id"])
    a, b = rec["calls"]
    if name not in _FORKS:  # the sampled reply is reused token for token
        prefix = a["prompt_ids"] + a["output_ids"]
        assert b["prompt_ids"][: len(prefix)] == prefix
        assert not b["fork"]
    # Anthropic Messages, streamed.
    r = await new_rollout(gw)
    ant = anthropic.AsyncAnthropic(base_url=gw.url, api_key=r["key"])
    amsgs: list[Any] = [{"role": "user", "content": "run echo hi"}]
    async with ant.messages.stream(
        model="claude-x", max_tokens=512, messages=amsgs, tools=TOOLS_ANT, system="Be brief."
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = final.content[-1]
    assert use.type == "tool_use" and use.name == "bash" and use.input == {"command": "echo hi"}
    amsgs += [
        {"role": "assistant", "content": [blk.model_dump() for blk in final.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "hi"}],
        },
    ]
    done = await ant.messages.create(
        model="claude-x", max_tokens=512, messages=amsgs, tools=TOOLS_ANT, system="Be brief."
    )
    assert done.content[0].type == "text" and done.content[0].text == "The command printed hi."
    await ant.close()


async def test_cli_format_flags_reach_the_engine_and_the_parser(tmp_path: Path) -> None:
    # A Qwen3-Coder directory served as Hermes with no reasoning: the scripted engine
    # writes Hermes tags and the gateway parses them, as `--tool-format hermes` says.
    model = build_tiny_family("qwen3_coder", tmp_path / "qwen3_coder")
    script = write_script(tmp_path / "script.jsonl", TOOL_SCRIPT)
    port, admin_port = free_port(), free_port()
    argv = [OPENFORGE, "gateway", "--engine", "scripted", "--script", str(script)]
    argv += ["--model", str(model), "--store", str(tmp_path / "store.db")]
    argv += ["--port", str(port), "--admin-port", str(admin_port)]
    argv += ["--tool-format", "hermes", "--reasoning-format", "none"]
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": "t" * 32}
    with (tmp_path / "gateway.log").open("ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{admin_port}") as http:
            for _ in range(600):
                assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            admin = httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{admin_port}/admin",
                headers={"Authorization": f"Bearer {env['OPENFORGE_ADMIN_TOKEN']}"},
            )
            r = (await admin.post("/rollouts", json={})).json()
            oai = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x")
            msgs: list[Any] = [{"role": "user", "content": "run echo hi"}]
            done = await oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS_OAI)
            await oai.close()
            rec = (await admin.get(f"/rollouts/{r['rollout_id']}", params={"tokens": 1})).json()
            await admin.aclose()
        call = done.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "bash"  # type: ignore[union-attr]
        assert json.loads(call.function.arguments) == {"command": "echo hi"}  # type: ignore[union-attr]
        written = load_tokenizer(model).decode(rec["calls"][0]["output_ids"])
        assert written.startswith('<tool_call>{"name": "bash"'), written
    finally:
        proc.terminate()
        proc.wait(timeout=30)
