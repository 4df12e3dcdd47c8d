"""A store that cannot write (a full disk) turns answers into errors in the dialect's shape —
JSON for plain calls, an in-band error event for streams — never a plain-text 500, and the
gateway serves again once space is back. Nothing answered as a success is unrecorded."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from openforge.engines.scripted import ScriptedEngine
from openforge.gateway.server import Gateway
from openforge.store.sqlite import SqliteStore

from .conftest import MODEL, new_rollout, rollout_calls, write_script

TEXT = [{"text": "an answer that is long enough to need a few pages " * 20}]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a real file system that fills up."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:  # not root, or no mount namespace rights
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb") as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    return filler


async def test_full_disk_gives_dialect_errors_then_recovers(
    small_disk: Path, tmp_path: Path
) -> None:
    script = write_script(tmp_path / "script.jsonl", TEXT * 20)
    engine = ScriptedEngine.for_model(script, MODEL)
    store = SqliteStore(small_disk / "store.db")
    async with Gateway(engine, store, model=MODEL) as gw:
        r = await new_rollout(gw)
        messages: Any = [{"role": "user", "content": "hi"}]
        oai = openai.AsyncOpenAI(base_url=r["openai_base_url"], api_key="x", max_retries=0)
        ant = anthropic.AsyncAnthropic(base_url=r["anthropic_base_url"], api_key="x", max_retries=0)
        ok = await oai.chat.completions.create(model="m", messages=messages)
        assert ok.choices[0].message.content
        filler = _fill(small_disk)
        with pytest.raises(openai.InternalServerError) as json_err:
            await oai.chat.completions.create(model="m", messages=messages)
        assert "could not record" in json_err.value.body["message"]  # type: ignore[index]
        with pytest.raises(anthropic.InternalServerError) as ant_err:
            await ant.messages.create(model="m", max_tokens=64, messages=messages)
        assert ant_err.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        with pytest.raises(openai.APIError) as stream_err:  # the stream ends with an error event
            stream = await oai.chat.completions.create(model="m", messages=messages, stream=True)
            async for _ in stream:
                pass
        assert "could not record" in str(stream_err.value)
        filler.unlink()  # space is back: the gateway serves and records again
        again = await oai.chat.completions.create(model="m", messages=messages)
        assert again.choices[0].message.content
        await oai.close()
        await ant.close()
        statuses = [c["status"] for c in (await rollout_calls(gw, r["rollout_id"]))["calls"]]
        assert statuses[0] == "ok" and statuses[-1] == "ok"
