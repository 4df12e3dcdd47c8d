"""Browser-Use's request shape served by the local engine under its strict schema."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import openai
from PIL import Image

from openforge.engines.local import LocalEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import resolve_model
from openforge.store.sqlite import SqliteStore

from .browser_use_shape import agent_output_schema, system_prompt


def _screenshot(step: int) -> str:
    img = Image.new("RGB", (320, 180), (20 * step, 90, 160))
    out = io.BytesIO()
    img.save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


async def test_every_answer_validates(tmp_path: Path) -> None:
    schema = agent_output_schema()
    system = system_prompt()
    assert len(json.dumps(schema)) > 15_000 and len(system) >= 24_000
    engine = LocalEngine("tiny", threads=1)
    store = SqliteStore(tmp_path / "store.db")
    async with Gateway(engine, store, model=resolve_model("tiny"), allow_anonymous=True) as gw:
        async with openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x") as client:
            for step in range(3):
                messages: list[Any] = [
                    {"role": "system", "content": system},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"Step {step}. [1]<button>Search</button>"},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/png;base64,{_screenshot(step)}"},
                            },
                        ],
                    },
                ]
                answer = await client.chat.completions.create(
                    model="browser-use",
                    messages=messages,
                    temperature=1.0,
                    seed=step,
                    max_tokens=1500,
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": "AgentOutput", "schema": schema, "strict": True},
                    },
                )
                choice = answer.choices[0]
                assert choice.finish_reason == "stop", choice.message.content
                jsonschema.validate(json.loads(choice.message.content or ""), schema)
        anonymous = await gw.apps.control.anonymous()
        calls = await store.calls(anonymous.id)
    assert [c.render_info["constrained"]["name"] for c in calls] == ["AgentOutput"] * 3
    assert all(len(c.render_info["images"]) == 1 for c in calls)
