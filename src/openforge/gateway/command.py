"""``openforge gateway``: serve a model to harnesses in their own dialects."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]

_ENGINES = ("scripted", "local", "vllm", "sglang", "upstream")


def _fail(message: str) -> None:
    typer.echo(f"openforge gateway: {message}", err=True)
    raise typer.Exit(2)


def gateway(
    model: Annotated[str, typer.Option(help="Model name or path (tokenizer, template, context).")],
    store: Annotated[Path, typer.Option(help="SQLite store file (created if absent).")],
    engine: Annotated[str, typer.Option(help="scripted, local, vllm, sglang or upstream.")] = (
        "scripted"
    ),
    script: Annotated[
        Path | None, typer.Option(help="JSONL replies for --engine scripted.")
    ] = None,
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    allow_anonymous: Annotated[
        bool, typer.Option(help="Serve keyless calls under an anonymous rollout.")
    ] = False,
    url: Annotated[
        list[str] | None, typer.Option(help="Engine server URL(s) (vllm, sglang, upstream).")
    ] = None,
    api: Annotated[
        str | None, typer.Option(help="Upstream API style: openai or anthropic.")
    ] = None,
    max_context: Annotated[
        int | None, typer.Option(help="Refuse prompts longer than this many tokens.")
    ] = None,
    public_url: Annotated[
        str | None, typer.Option(help="Root URL harnesses reach (default: as requested).")
    ] = None,
    served_model: Annotated[
        str, typer.Option(help="Model name the engine server knows (vllm, sglang, upstream).")
    ] = "",
) -> None:
    """Serve OpenAI Chat, OpenAI Responses and Anthropic Messages, recording every call."""
    from openforge.gateway.launch import build_engine, resolve_model_dir

    if engine not in _ENGINES:
        _fail(f"--engine must be one of {', '.join(_ENGINES)}, not {engine!r}")
    model_dir = resolve_model_dir(model, _fail)
    eng = build_engine(engine, model_dir, script, url or [], api, max_context, _fail, served_model)

    from openforge.gateway.server import serve
    from openforge.store.base import StoreError
    from openforge.store.sqlite import SqliteStore

    try:
        st = SqliteStore(store)
    except StoreError as exc:
        _fail(str(exc))
        return
    serve(
        eng,
        st,
        model=model_dir,
        host=host,
        port=port,
        allow_anonymous=allow_anonymous,
        admin_token=os.environ.get("OPENFORGE_ADMIN_TOKEN") or None,
        public_url=public_url,
        on_ready=lambda u: typer.echo(f"openforge gateway: serving {u}", err=True),
    )


def register(app: typer.Typer) -> None:
    """Add ``openforge gateway`` to the ``openforge`` app."""
    app.command("gateway")(gateway)
