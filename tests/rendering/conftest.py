"""Fixtures: the real SmolLM2 tokenizer (CI pulls the model directory before tests run)."""

from __future__ import annotations

import pytest

from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.rendering import Renderer, load_renderer

SMOLLM2 = models_dir() / DEFAULT_MODEL


@pytest.fixture(scope="session")
def renderer() -> Renderer:
    if not (SMOLLM2 / "tokenizer.json").is_file():
        pytest.fail(f"{SMOLLM2} is missing: the setup script pulls it (openforge models pull)")
    return load_renderer(SMOLLM2)
