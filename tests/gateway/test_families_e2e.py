"""A tool-call round trip through each model family's own format: the scripted engine
emits the family's tokens, the official OpenAI and Anthropic SDKs are the harness."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.tiny_families import TINY_FAMILIES, build_tiny_family
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
