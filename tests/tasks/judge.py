"""A judge endpoint for suite-grading tests: a real gateway whose scripted engine always
answers with one fixed judgement, reached the way a suite's grader reaches its judge (an
OpenAI-compatible base URL and key). It has its own store, apart from any training run's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir


@asynccontextmanager
async def judge_endpoint(
    work: Path, reply: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[str]:
    """Serve ``reply`` to every chat call; point ``OPENFORGE_JUDGE_*`` at it."""
    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.server import Gateway
    from openforge.store.sqlite import SqliteStore

    model = models_dir() / DEFAULT_MODEL
    if not model.is_dir():
        pytest.fail(f"the SmolLM2 model directory {model} is missing: the setup script pulls it")
    work.mkdir(parents=True, exist_ok=True)
    script = work / "judge.jsonl"
    script.write_bytes(orjson.dumps({"text": reply}) + b"\n")
    engine = ScriptedEngine.for_model(script, model)
    async with Gateway(engine, SqliteStore(work / "judge.db"), model=model) as gw:
        async with httpx.AsyncClient() as http:
            resp = await http.post(
                f"{gw.admin_url}/rollouts",
                json={"task_id": "judge", "group_id": "judge"},
                headers={"Authorization": f"Bearer {gw.admin_token}"},
            )
        minted = resp.json()
        base = minted["openai_base_url"]
        monkeypatch.setenv("OPENFORGE_JUDGE_BASE_URL", base)
        monkeypatch.setenv("OPENFORGE_JUDGE_API_KEY", minted["key"])
        monkeypatch.setenv("OPENFORGE_JUDGE_MODEL", "judge")
        yield base
