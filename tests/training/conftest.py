"""Fixtures shared by the trainer's tests (CPU and CUDA)."""

from __future__ import annotations

from pathlib import Path

import pytest

from openforge.models.registry import resolve_model


@pytest.fixture(scope="module")
def tiny() -> Path:
    """The random 2-layer Llama with SmolLM2's tokenizer (built on first use)."""
    return resolve_model("tiny")
