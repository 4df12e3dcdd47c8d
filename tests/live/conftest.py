"""The live vLLM server, started once for the tests of this package (see vllm_server.py).

Package-scoped: every test that needs it lives here, so it starts once per pytest session,
and its ~5 GB are given back before the rest of the suite runs. It serves SmolLM2's weights
with a tool-aware chat template (tool_model.py); the token-in tests send ids rendered with
SmolLM2's own directory, whose tokenizer is the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from openforge.models.registry import DEFAULT_MODEL, resolve_model

from .tool_model import build_tool_model
from .vllm_server import VLLMServer, vllm_missing


@pytest.fixture(scope="package")
def smollm2() -> Path:
    """SmolLM2-135M's model directory (pulled by the setup script)."""
    return resolve_model(DEFAULT_MODEL)


@pytest.fixture(scope="package")
def tool_model(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's weights with the tool-aware template: the directory the server serves."""
    return build_tool_model(smollm2, tmp_path_factory.mktemp("tool-model"))


@pytest.fixture(scope="package")
def live_vllm(tool_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """The running vLLM server; stopped (the whole process group) after the package."""
    missing = vllm_missing()
    if missing is not None:
        # vLLM's CPU build installs on every machine this suite runs on: its absence is a
        # broken setup, not a reason to skip (as with podman in tests/conftest.py).
        pytest.fail(missing)
    server = VLLMServer.start_live(tool_model, tmp_path_factory.mktemp("vllm"))
    try:
        yield server
    finally:
        server.stop()
