"""Gateway fixtures: a real uvicorn server on 127.0.0.1 with the scripted engine."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import openai
import orjson
import pytest

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.store.sqlite import SqliteStore

MODEL = os.environ.get("OPENFORGE_TEST_MODEL") or str(models_dir() / DEFAULT_MODEL)

TOOL_SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
    {"text": "The command printed hi."},
]


def write_script(path: Path, replies: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in replies) + b"\n")
    return path


@pytest.fixture
def make_gateway(tmp_path: Path) -> Callable[..., Any]:
    """``async with make_gateway(replies, **kw) as gw`` — a fresh store per gateway."""

    def make(replies: list[dict[str, Any]] | None = None, **kw: Any) -> Gateway:
        script = write_script(tmp_path / "script.jsonl", replies or TOOL_SCRIPT)
        max_context = kw.pop("max_context", None)
        delay = kw.pop("delay_s", 0.0)
        engine = ScriptedEngine.for_model(script, MODEL, max_context=max_context)
        engine._delay_s = delay
        return Gateway(engine, SqliteStore(tmp_path / "store.db"), model=MODEL, **kw)

    return make


@pytest.fixture
async def gateway(make_gateway: Callable[..., Gateway]) -> AsyncIterator[Gateway]:
    async with make_gateway() as gw:
        yield gw


async def new_rollout(gw: Gateway, **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=gw.admin_headers) as c:
        r = await c.post(gw.admin_url + "/rollouts", json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())


async def rollout_calls(gw: Gateway, rollout_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=gw.admin_headers) as c:
        r = await c.get(f"{gw.admin_url}/rollouts/{rollout_id}", params={"tokens": 1})
        assert r.status_code == 200, r.text
        return dict(r.json())


# SDK clients the tests opened, closed after each test: an unclosed httpx pool warns at
# interpreter exit and can hold a connection the next test's gateway shutdown waits on.
_SDK_CLIENTS: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
SdkClient = TypeVar("SdkClient", openai.AsyncOpenAI, anthropic.AsyncAnthropic)


@pytest.fixture(autouse=True)
async def _close_sdk_clients() -> AsyncIterator[None]:
    yield
    while _SDK_CLIENTS:
        await _SDK_CLIENTS.pop().close()


def closing(client: SdkClient) -> SdkClient:
    """``client``, closed when the test ends."""
    _SDK_CLIENTS.append(client)
    return client


def openai_client(r: dict[str, Any]) -> openai.AsyncOpenAI:
    """The official OpenAI SDK at rollout ``r``'s base URL, no retries, closed after the test."""
    return closing(openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0))


def anthropic_client(r: dict[str, Any]) -> anthropic.AsyncAnthropic:
    """The official Anthropic SDK at rollout ``r``'s base URL, no retries, closed after the test."""
    return closing(
        anthropic.AsyncAnthropic(base_url=r["anthropic_base_url"], api_key="x", max_retries=0)
    )
