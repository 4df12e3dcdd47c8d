"""The command line's shared vocabulary: one spelling, short flag and default per thing.

Every command that takes harness options, a sandbox backend, a container engine or a task
selection takes them from here, so ``openforge rollout``, ``eval``, ``harness …``, ``tasks
check`` and ``images build`` say the same thing the same way. Old spellings stay as hidden options
that still work and print a deprecation warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "BACKEND_HELP",
    "DEFAULT_BACKEND",
    "DEFAULT_CONTAINER_ENGINE",
    "DEFAULT_GATEWAY_PORT",
    "BackendOpt",
    "ClawEvalFixturesOpt",
    "ContainerEngineOpt",
    "ExcludeOpt",
    "HarnessOptionOpt",
    "LimitOpt",
    "OldEngineOpt",
    "OldOptionOpt",
    "SampleOpt",
    "SeedOpt",
    "TaskOpt",
    "container_engine",
    "harness_options",
    "warn_deprecated",
]

DEFAULT_BACKEND = "local"
DEFAULT_CONTAINER_ENGINE = "podman"
DEFAULT_GATEWAY_PORT = 8000  # the model API; the admin API listens on the next port

BACKEND_HELP = (
    "Sandbox backend: local (bubblewrap, no image), podman, docker or kubernetes. Tasks that "
    "bring their own image (Harbor) need podman, docker or kubernetes."
)

HarnessOptionOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--harness-option",
        "-O",
        metavar="KEY=VALUE",
        help="An option of the harness adapter (repeatable), e.g. -O command='python3 agent.py' "
        "for the shell harness; `openforge harness list` shows which adapters need one.",
    ),
]
# The spelling `openforge harness …` used before: accepted, hidden, warned about.
OldOptionOpt = Annotated[
    list[str] | None,
    typer.Option("--option", "-o", hidden=True, help="Deprecated: use --harness-option/-O."),
]
BackendOpt = Annotated[str, typer.Option("--backend", help=BACKEND_HELP)]
ContainerEngineOpt = Annotated[
    str,
    typer.Option(
        "--container-engine",
        help="Container engine that builds (and pushes) the image: podman or docker.",
    ),
]
# `--engine` meant the container engine here but the model engine in `openforge gateway`.
OldEngineOpt = Annotated[
    str | None,
    typer.Option("--engine", hidden=True, help="Deprecated: use --container-engine."),
]


def warn_deprecated(old: str, new: str) -> None:
    """Tell the user, on stderr, that ``old`` still works but ``new`` is its name now."""
    typer.echo(f"warning: {old} is deprecated; use {new}", err=True)


def harness_options(pairs: list[str] | None, old: list[str] | None = None) -> dict[str, str]:
    """The adapter's keyword options from ``-O KEY=VALUE`` pairs (and the deprecated ``-o``).

    Dashes in a key become underscores (``-O max-steps=5`` is ``max_steps``): the adapters'
    options are Python keyword arguments.
    """
    if old:
        warn_deprecated("--option/-o", "--harness-option/-O")
    out: dict[str, str] = {}
    for pair in [*(pairs or ()), *(old or ())]:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(
                f"expected KEY=VALUE, got {pair!r}", param_hint="'--harness-option' / '-O'"
            )
        out[key.replace("-", "_")] = value
    return out


def container_engine(engine: str, old: str | None) -> str:
    """The container engine from ``--container-engine``, or the deprecated ``--engine``."""
    if old is not None:
        warn_deprecated("--engine", "--container-engine")
        return old
    return engine


# Choosing some of the tasks `--tasks` loads (suites/selection.py; the options become a
# TaskSelection in suites/command.py), on every command that runs or checks tasks: rollout,
# eval, tasks check, images build.
TaskOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--task",
        metavar="ID_OR_GLOB",
        help="Only this task (an id, or a glob such as 'cpp-*'; repeatable).",
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude", metavar="GLOB", help="Leave out tasks whose id matches (repeatable)."
    ),
]
LimitOpt = Annotated[
    int | None, typer.Option("--limit", min=1, metavar="N", help="Only the first N tasks selected.")
]
SampleOpt = Annotated[
    int | None,
    typer.Option("--sample", min=1, metavar="N", help="N tasks drawn at random (see --seed)."),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of --sample's draw.")]
ClawEvalFixturesOpt = Annotated[
    Path | None,
    typer.Option(
        "--claweval-fixtures",
        metavar="DIR",
        help="ClawEval: the fixtures its GitHub repository leaves out (videos, documents), "
        "its data release extracted; default $OPENFORGE_CLAWEVAL_FIXTURES.",
    ),
]
