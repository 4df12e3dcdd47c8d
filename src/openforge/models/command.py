"""``openforge models …``: fetch, convert and list models."""

from __future__ import annotations

import typer

models_app = typer.Typer(help="Fetch and list models.", no_args_is_help=True)


@models_app.command("pull")
def pull_command(
    name: str = typer.Argument(..., help="A known model name (see `openforge models list`)."),
    force: bool = typer.Option(False, "--force", help="Convert again even if present."),
) -> None:
    """Download a known model and convert it once to a safetensors directory."""
    from openforge.models.registry import ModelNotFound, pull

    try:
        path = pull(name, force=force)
    except ModelNotFound as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))


@models_app.command("list")
def list_command() -> None:
    """List known models, whether each is pulled, and other converted directories."""
    from openforge.models.registry import KNOWN_MODELS, TINY, is_complete, models_dir

    root = models_dir()
    typer.echo(f"models directory: {root}")
    for spec in KNOWN_MODELS.values():
        state = "pulled" if is_complete(root / spec.name) else "not pulled"
        typer.echo(f"  {spec.name:<16} {state:<11} {spec.description}")
    tiny_state = "built" if is_complete(root / TINY) else "built on first use"
    tiny_desc = "random 2-layer Llama with SmolLM2's tokenizer (tests)"
    typer.echo(f"  {TINY:<16} {tiny_state:<11} {tiny_desc}")
    gguf_dir = root / "gguf"
    if gguf_dir.is_dir():
        for path in sorted(gguf_dir.iterdir()):
            if is_complete(path):
                typer.echo(f"  {path}  (converted from a .gguf file)")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``openforge`` app."""
    app.add_typer(models_app, name="models")
