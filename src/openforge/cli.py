"""``openforge …``: the command line. Each part of OpenForge contributes its own commands.

Every area keeps its commands in ``<area>/command.py`` with ``register(app)``; heavy
imports stay inside the command functions so ``openforge --help`` is instant.
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="openforge",
    help="Train LLM agents with RL inside their real harnesses.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Click's plain help: it wraps at word boundaries and never cuts a URL short, as rich's
    # option tables do at 80 columns; up to 120 columns on a wide terminal.
    rich_markup_mode=None,
    context_settings={"max_content_width": 120},
)

_AREAS = (
    "openforge.gateway.command",
    "openforge.models.command",
    "openforge.traces.command",
    "openforge.rollouts.command",
    "openforge.suites.command",
    "openforge.sandboxes.command",
    "openforge.probing.command",
    "openforge.training.command",
)


@app.callback()
def _root() -> None:
    """Train LLM agents with RL inside their real harnesses."""


@app.command()
def version() -> None:
    """Print OpenForge's version."""
    from openforge import __version__

    typer.echo(__version__)


for _name in _AREAS:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Console-script entry point."""
    app()
