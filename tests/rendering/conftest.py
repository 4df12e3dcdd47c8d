"""Fixtures: the real SmolLM2 tokenizer (CI pulls the model directory before tests run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openforge.rendering import Renderer, load_renderer

SMOLLM2 = Path("/root/.cache/openforge/models/smollm2-135m")


@pytest.fixture(scope="session")
def renderer() -> Renderer:
    if not (SMOLLM2 / "tokenizer.json").is_file():
        pytest.skip(f"{SMOLLM2} is missing (run `openforge models pull smollm2-135m`)")
    return load_renderer(SMOLLM2)
