"""sandboxd as a real process, driven by the real SandboxdClient over HTTP."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from openforge.sandboxes import SandboxError
from openforge.sandboxes.fspaths import PathEscape
from openforge.sandboxes.remote import RemoteSandbox, SandboxdClient

from .test_local import _procs_with

TOKEN = "t-" + secrets.token_hex(16)


@pytest.fixture
async def sandboxd(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    work, home = tmp_path / "work", tmp_path / "home"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "openforge.sandboxes.sandboxd", "--host", "127.0.0.1",
        "--port", "0", "--workdir", str(work), "--home", str(home),
        env={**os.environ, "OPENFORGE_SANDBOXD_TOKEN": TOKEN},
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    port = orjson.loads(await proc.stdout.readline())["port"]
    url = f"http://127.0.0.1:{port}"
    client = SandboxdClient(url, TOKEN)
    await client.wait_ready(30)
    await client.aclose()
    yield url, work
    proc.send_signal(signal.SIGTERM)
    await proc.wait()


@pytest.fixture
async def client(sandboxd: tuple[str, Path]) -> AsyncIterator[SandboxdClient]:
    c = SandboxdClient(sandboxd[0], TOKEN)
    yield c
    await c.aclose()


async def test_exec_streams_and_returns_exit_code(client: SandboxdClient) -> None:
    seen: list[tuple[str, bytes]] = []
    result = await client.exec(
        "cat; echo err >&2; pwd; exit 7",
        stdin=b"hello\n",
        on_output=lambda s, c: seen.append((s, c)),
    )
    assert result.exit_code == 7
    assert result.stdout.splitlines()[0] == b"hello"
    assert result.stdout.splitlines()[1].endswith(b"/work")
    assert result.stderr == b"err\n"
    assert b"".join(c for s, c in seen if s == "stdout") == result.stdout
    argv = await client.exec(["sh", "-c", 'echo "$X"'], env={"X": "y"})
    assert argv.stdout == b"y\n"


async def test_timeout_kills_the_process_tree(client: SandboxdClient) -> None:
    marker = "of-marker-" + secrets.token_hex(4)
    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {marker}"
    result = await client.exec(f"{sleeper} & setsid {sleeper} & {sleeper}", timeout=1.0)
    assert result.timed_out and result.exit_code == 137
    for _ in range(200):  # SIGKILLed processes vanish once reaped
        if not _procs_with(marker):
            break
        await asyncio.sleep(0.01)
    assert _procs_with(marker) == []


async def test_files_and_escapes(client: SandboxdClient, sandboxd: tuple[str, Path]) -> None:
    await client.put({"d/a.txt": b"A", "~/cfg": b"C"})
    assert (sandboxd[1] / "d" / "a.txt").read_bytes() == b"A"
    assert await client.get(["d/a.txt", "~/cfg", "nope"]) == {"d/a.txt": b"A", "~/cfg": b"C"}
    for bad in ("../x", "/etc/passwd"):
        with pytest.raises(PathEscape):
            await client.put({bad: b"x"})
        with pytest.raises(PathEscape):
            await client.get([bad])


async def test_token_is_required(sandboxd: tuple[str, Path]) -> None:
    url = sandboxd[0]
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{url}/health")).status_code == 200
        r = await http.post(f"{url}/exec", json={"cmd": "true"})
        assert r.status_code == 401
        r = await http.post(
            f"{url}/exec", json={"cmd": "true"}, headers={"authorization": "Bearer wrong"}
        )
        assert r.status_code == 401
        r = await http.post(
            f"{url}/exec", content=b"{", headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request"
    wrong = SandboxdClient(url, "wrong")
    with pytest.raises(SandboxError, match="401"):
        await wrong.exec("true")
    await wrong.aclose()


async def test_remote_sandbox_close(sandboxd: tuple[str, Path]) -> None:
    removed: list[bool] = []

    async def remove() -> None:
        removed.append(True)

    box = RemoteSandbox("x", SandboxdClient(sandboxd[0], TOKEN), None, remove)
    assert (await box.exec(["true"])).exit_code == 0
    await box.close()
    await box.close()
    assert removed == [True]
    with pytest.raises(SandboxError):
        await box.exec(["true"])


async def test_unreachable_sandboxd_is_a_sandbox_error() -> None:
    client = SandboxdClient("http://127.0.0.1:9", TOKEN)
    with pytest.raises(SandboxError):
        await client.exec("true")
    with pytest.raises(SandboxError, match="not ready"):
        await client.wait_ready(0.2)
    await client.aclose()
