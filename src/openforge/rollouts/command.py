"""``openforge`` commands of this area."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``openforge`` app."""
