"""Fixtures: a real SQLite store of varied rollouts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .store_data import Built, build


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return asyncio.run(build(tmp_path / "store.db"))
