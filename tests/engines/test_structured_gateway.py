"""response_format through the gateway: SmolLM2 on the local engine, asked by the openai SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from openforge.engines.local import LocalEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "country": {"type": "string", "enum": ["France", "Germany", "Italy", "Spain"]},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["city", "country", "population_millions"],
    "additionalProperties": False,
}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Gateway]:
    path = tmp_path / "store.db"
    engine = LocalEngine("smollm2-135m", threads=2)
    async with Gateway(
        engine, SqliteStore(path), model=resolve_model("smollm2-135m"), allow_anonymous=True
    ) as gw:
        yield gw


def _client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)


@pytest.mark.slow
async def test_chat_json_schema_strict(served: Gateway) -> None:
    async with _client(served) as client:
        for seed in (1, 2):
            answer = await client.chat.completions.create(
                model="smollm2",
                temperature=0.7,
                seed=seed,
                max_tokens=120,
                messages=[{"role": "user", "content": "Describe the capital of France as JSON."}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "city", "schema": CITY, "strict": True},
                },
            )
            choice = answer.choices[0]
            assert choice.finish_reason == "stop"
            jsonschema.validate(json.loads(choice.message.content or ""), CITY)
    anonymous = await served.apps.control.anonymous()
    calls = await served.store.calls(anonymous.id)
    assert calls and calls[-1].render_info["constrained"] == {
        "type": "json_schema",
        "name": "city",
        "strict": True,
    }


@pytest.mark.slow
async def test_responses_text_format_and_json_object(served: Gateway) -> None:
    async with _client(served) as client:
        resp = await client.responses.create(
            model="smollm2",
            input="Describe the capital of Italy as JSON.",
            max_output_tokens=120,
            temperature=0,
            text={
                "format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}
            },
        )
        jsonschema.validate(json.loads(resp.output_text), CITY)
        assert resp.text is not None and resp.text.format is not None
        assert resp.text.format.type == "json_schema"
        obj = await client.chat.completions.create(
            model="smollm2",
            temperature=0,
            max_tokens=120,
            messages=[{"role": "user", "content": "Give me a JSON object about Paris."}],
            response_format={"type": "json_object"},
        )
        if obj.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(obj.choices[0].message.content or ""), dict)


@pytest.mark.slow
async def test_unusable_schema_is_a_400_naming_the_field(served: Gateway) -> None:
    bad: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "nonsense"}}}
    async with _client(served) as client:
        with pytest.raises(openai.BadRequestError) as chat:
            await client.chat.completions.create(
                model="smollm2",
                max_tokens=8,
                messages=[{"role": "user", "content": "x"}],
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "b", "schema": bad},
                },
            )
        assert chat.value.body["param"] == "response_format"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as resp:
            await client.responses.create(
                model="smollm2",
                input="x",
                max_output_tokens=8,
                text={"format": {"type": "json_schema", "name": "b", "schema": bad}},
            )
        assert resp.value.body["param"] == "text.format"  # type: ignore[index]
