"""A real ``openforge gateway --engine scripted`` subprocess, for tests of the parts above the
gateway (rollouts, environments) that need one to talk to."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir

MODEL = models_dir() / DEFAULT_MODEL
OPENFORGE = str(Path(sys.executable).parent / "openforge")


def admin_headers() -> dict[str, str]:
    """The admin header for the running gateway (its token is in the environment)."""
    return {"Authorization": f"Bearer {os.environ['OPENFORGE_ADMIN_TOKEN']}"}


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# A scripted reply: its text, or a whole script line (``{"tool_calls": [...]}``).
Reply = str | dict[str, object]


def _script(path: Path, replies: Sequence[Reply]) -> Path:
    lines = (json.dumps(r if isinstance(r, dict) else {"text": r}) for r in replies)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def start_gateway(
    d: Path,
    port: int,
    admin_port: int,
    token: str,
    replies: Sequence[Reply] | None = None,
    judge: Sequence[Reply] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``openforge gateway --engine scripted`` answering ``replies`` in turn (every reply
    ``hello`` by default; a dict is a whole script line, e.g. tool calls), with a scripted
    judge engine answering ``judge`` when given, its store and log in ``d``, models on
    ``port``, admin on ``admin_port`` under ``token``; return once its admin listener
    answers ``/health``."""
    if not MODEL.is_dir():
        pytest.fail(f"the SmolLM2 model directory {MODEL} is missing: the setup script pulls it")
    script = _script(d / "script.jsonl", replies or ["hello"])
    argv = [OPENFORGE, "gateway", "--engine", "scripted", "--script", str(script)]
    if judge is not None:
        argv += ["--judge-engine", f"scripted:{_script(d / 'judge.jsonl', judge)}"]
    argv += ["--model", str(MODEL), "--store", str(d / "store.db")]
    argv += ["--port", str(port), "--admin-port", str(admin_port)]
    env = {**os.environ, "OPENFORGE_ADMIN_TOKEN": token}
    with (d / "gateway.log").open("ab") as log:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{admin_port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError((d / "gateway.log").read_text())
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the gateway did not answer /health: {(d / 'gateway.log').read_text()}")


class ScriptedGateway(Protocol):
    """Starts a scripted gateway (policy replies, optional judge replies); its admin URL."""

    def __call__(self, replies: Sequence[Reply], judge: Sequence[Reply] | None = None) -> str:
        """Start one; return its admin URL."""
        ...


@pytest.fixture(scope="module")
def scripted_gateway(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ScriptedGateway]:
    """Start ``openforge gateway --engine scripted`` with the given replies (a text, or a
    script line such as ``{"tool_calls": [...]}``) and, when given, a scripted judge engine's;
    returns its admin URL. Its admin token is put in ``$OPENFORGE_ADMIN_TOKEN`` while it
    runs."""
    procs: list[subprocess.Popen[bytes]] = []
    saved = os.environ.get("OPENFORGE_ADMIN_TOKEN")
    token = secrets.token_urlsafe(32)
    os.environ["OPENFORGE_ADMIN_TOKEN"] = token

    def start(replies: Sequence[Reply], judge: Sequence[Reply] | None = None) -> str:
        admin_port = free_port()
        d = tmp_path_factory.mktemp("gateway")
        procs.append(start_gateway(d, free_port(), admin_port, token, replies, judge))
        return f"http://127.0.0.1:{admin_port}"

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        if saved is None:
            os.environ.pop("OPENFORGE_ADMIN_TOKEN", None)
        else:
            os.environ["OPENFORGE_ADMIN_TOKEN"] = saved
