"""Fixtures for the GUI environment tests: a local sandbox backend, a scripted gateway."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.sandboxes.local import LocalBackend

MODEL = models_dir() / DEFAULT_MODEL
OPENFORGE = str(Path(sys.executable).parent / "openforge")


def admin_headers() -> dict[str, str]:
    """The admin header for the running scripted gateway."""
    return {"Authorization": f"Bearer {os.environ['OPENFORGE_ADMIN_TOKEN']}"}


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    """A local (bubblewrap) backend rooted in the test's tmp dir."""
    be = LocalBackend(root=tmp_path / "sandboxes")
    try:
        yield be
    finally:
        await be.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def scripted_gateway(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[list[str]], str]]:
    """Start ``openforge gateway --engine scripted`` with the given reply texts; returns its
    admin URL. Its admin token is put in ``$OPENFORGE_ADMIN_TOKEN`` while it runs."""
    if not MODEL.is_dir():
        pytest.fail(f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    saved = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    token = secrets.token_urlsafe(32)
    os.environ["OPENFORGE_ADMIN_TOKEN"] = token

    def start(replies: list[str]) -> str:
        d = tmp_path_factory.mktemp("gateway")
        script = d / "script.jsonl"
        script.write_text("".join(f'{{"text": {json.dumps(r)}}}\n' for r in replies))
        port, admin_port = _free_port(), _free_port()
        argv = [
            OPENFORGE,
            "gateway",
            "--engine",
            "scripted",
            "--script",
            str(script),
            "--model",
            str(MODEL),
            "--store",
            str(d / "store.db"),
            "--port",
            str(port),
            "--admin-port",
            str(admin_port),
        ]
        log = (d / "gateway.log").open("wb")
        logs.append(log)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        procs.append(proc)
        url = f"http://127.0.0.1:{admin_port}"
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError((d / "gateway.log").read_text())
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    return url
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the gateway did not start in 60 s")

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        for log in logs:
            log.close()
        if saved is None:
            os.environ.pop("OPENFORGE_ADMIN_TOKEN", None)
        else:
            os.environ["OPENFORGE_ADMIN_TOKEN"] = saved
