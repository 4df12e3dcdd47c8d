"""A wrong gateway URL stops ``openforge rollout``, ``eval`` and ``train`` before anything
runs, with a message saying what to pass: the model API's URL, a port nobody listens on,
a refused admin token, something that is not a URL (a real gateway subprocess)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import OPENFORGE, free_port, start_gateway


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """A gateway of its own (model port, admin port): its model API, admin API and token."""
    port, admin_port = free_port(), free_port()
    token = secrets.token_urlsafe(32)
    proc = start_gateway(tmp_path_factory.mktemp("gw"), port, admin_port, token)
    try:
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}", token
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _openforge(*args: str, token: str | None, home: Path | None) -> tuple[int, str]:
    env = dict(os.environ)
    if home is not None:
        env["OPENFORGE_HOME"] = str(home)  # no token file from elsewhere
    env.pop("OPENFORGE_ADMIN_TOKEN", None)
    if token is not None:
        env["OPENFORGE_ADMIN_TOKEN"] = token
    out = subprocess.run(
        [str(OPENFORGE), *args], capture_output=True, text=True, env=env, check=False
    )
    return out.returncode, out.stdout + out.stderr


def _rollout(command: str, gateway: str, out: Path, token: str | None) -> tuple[int, str]:
    return _openforge(
        command, "--tasks", "claw-mini", "--harness", "claw", "--gateway", gateway,
        "--out", str(out), token=token, home=out.parent / "home",
    )  # fmt: skip


@pytest.mark.parametrize("command", ["rollout", "eval"])
def test_wrong_gateway_urls_stop_at_once(
    command: str, ports: tuple[str, str, str], tmp_path: Path
) -> None:
    model, admin, token = ports
    out = tmp_path / "run"
    nobody = f"http://127.0.0.1:{free_port()}"
    cases = [
        # the model API: the gateway's own model port
        (model, token, ["is not a gateway's admin API", "no /admin routes", "admin API on"]),
        (nobody, token, ["nothing answers there", "Start the gateway first"]),
        (admin, "wrong-token", ["refused the admin token", "$OPENFORGE_ADMIN_TOKEN"]),
        (admin, None, ["refused the admin token", "no token file"]),
        ("127.0.0.1:8001", token, ["not an http(s) URL", "http://127.0.0.1:8001"]),
    ]
    for url, tok, needles in cases:
        code, text = _rollout(command, url, out, tok)
        assert code == 2, (url, text)
        for needle in needles:
            assert needle in text, (url, needle, text)
        assert "Traceback" not in text
        assert not out.exists()  # stopped before the run dir was made


def test_the_model_port_message_names_the_admin_port(tmp_path: Path) -> None:
    """A model API on port P: the message suggests P + 1, where `openforge gateway` puts
    the admin API by default."""
    port = free_port()
    (tmp_path / "gw").mkdir()
    proc = start_gateway(tmp_path / "gw", port, port + 1, "t0ken")
    try:
        code, text = _rollout("rollout", f"http://127.0.0.1:{port}", tmp_path / "run", "t0ken")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert code == 2 and f"--gateway http://127.0.0.1:{port + 1}" in text, text


def test_train_with_a_model_api_as_gateway_url_stops_at_once(
    ports: tuple[str, str, str], tmp_path: Path
) -> None:
    model, _, token = ports
    cfg = tmp_path / "train.yaml"
    cfg.write_text(
        f"gateway_url: {model}\nstore: {tmp_path / 'calls.db'}\nrun_dir: {tmp_path / 'run'}\n"
    )
    code, text = _openforge("train", str(cfg), token=token, home=tmp_path / "home")
    assert code == 2, text
    assert "gateway_url" in text and "is not a gateway's admin API" in text
    assert "Traceback" not in text


def test_gateway_engine_and_store_urls_nobody_serves_stop_at_once(tmp_path: Path) -> None:
    """``openforge gateway``: an engine server, a judge's server or a PostgreSQL store that
    cannot be reached stops it before any engine loads, naming the option."""
    nobody = f"http://127.0.0.1:{free_port()}"
    base = ["gateway", "--model", "smollm2-135m", "--port", str(free_port())]
    cases = [
        (["--engine", "vllm", "--url", nobody, "--store", str(tmp_path / "a.db")],
         [f"--url {nobody}: nothing answers there", "start the server first"]),
        (["--engine", "local", "--judge-engine", f"vllm:{nobody}", "--store",
          str(tmp_path / "b.db")],
         [f"--judge-engine vllm:{nobody}: {nobody}: nothing answers there"]),
        (["--engine", "sglang", "--url", "127.0.0.1:30000", "--store", str(tmp_path / "c.db")],
         ["not an http(s) URL"]),
        (["--engine", "local", "--store", f"postgresql://nobody@127.0.0.1:{free_port()}/x"],
         ["--store postgresql://nobody@127.0.0.1:", "cannot connect", "Connection refused"]),
    ]  # fmt: skip
    for args, needles in cases:
        code, text = _openforge(*base, *args, token="t", home=None)
        assert code == 2, (args, text)
        for needle in needles:
            assert needle in text, (needle, text)
        assert "Traceback" not in text and "Loading weights" not in text
