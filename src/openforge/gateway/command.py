"""``openforge gateway``: serve a model to harnesses in their own dialects."""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from openforge.cli_options import DEFAULT_GATEWAY_PORT
from openforge.gateway.launch import ENGINE_SPEC_HELP

if TYPE_CHECKING:
    from collections.abc import Callable

    from openforge.gateway.server import Gateway

__all__ = ["register"]

_ENGINES = ("scripted", "local", "vllm", "sglang", "upstream")


def _fail(message: str) -> None:
    typer.echo(f"openforge gateway: {message}", err=True)
    raise typer.Exit(2)


def _check_formats(tool_format: str | None, reasoning_format: str | None) -> None:
    from openforge.rendering.families.catalog import REASONING_FORMATS, TOOL_FORMATS

    if tool_format is not None and tool_format not in TOOL_FORMATS:
        _fail(f"--tool-format must be one of {', '.join(TOOL_FORMATS)}, not {tool_format!r}")
    if reasoning_format is not None and reasoning_format not in REASONING_FORMATS:
        known = ", ".join(REASONING_FORMATS)
        _fail(f"--reasoning-format must be one of {known}, not {reasoning_format!r}")


def _admin_token() -> tuple[str, str]:
    """The admin API's token and where a user finds it."""
    from openforge.home import admin_token_path, ensure_admin_token

    try:
        # Always a token: $OPENFORGE_ADMIN_TOKEN, else one generated once and kept 0600.
        token = ensure_admin_token()
    except OSError as exc:
        _fail(f"cannot create the admin token file {admin_token_path()}: {exc}")
        raise  # _fail exits; never reached
    if os.environ.get("OPENFORGE_ADMIN_TOKEN"):
        return token, "$OPENFORGE_ADMIN_TOKEN"
    return token, str(admin_token_path())


def _announce(where: str, gw: Gateway) -> None:
    """Tell the user where the two APIs listen (once the gateway is ready)."""
    typer.echo(f"openforge gateway: model API on {gw.url}", err=True)
    typer.echo(
        f"openforge gateway: admin API on {gw.control_url} (give this URL to "
        f"--gateway; token in {where})",
        err=True,
    )


def gateway(
    model: Annotated[str, typer.Option(help="Model name or path (tokenizer, template, context).")],
    store: Annotated[
        str,
        typer.Option(
            help="SQLite store file (created if absent) or a postgresql:// URL.",
            envvar="OPENFORGE_STORE",
        ),
    ],
    engine: Annotated[str, typer.Option(help="scripted, local, vllm, sglang or upstream.")] = (
        "scripted"
    ),
    script: Annotated[
        Path | None, typer.Option(help="JSONL replies for --engine scripted.")
    ] = None,
    port: Annotated[
        int, typer.Option(help="TCP port of the model API (harnesses).")
    ] = DEFAULT_GATEWAY_PORT,
    host: Annotated[str, typer.Option(help="Interface the model API binds.")] = "127.0.0.1",
    admin_port: Annotated[
        int | None,
        typer.Option(help="TCP port of the admin API (orchestrator, trainer); default PORT+1."),
    ] = None,
    admin_host: Annotated[
        str, typer.Option(help="Interface the admin API binds (keep it off sandboxes' reach).")
    ] = "127.0.0.1",
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
        str | None,
        typer.Option(help="Root URL harnesses reach (default: the model API's bound address)."),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option(help="Largest model-call body accepted (admin bodies: 1 MB).")
    ] = 64.0,
    header_timeout: Annotated[
        float, typer.Option(help="Seconds a request's line and headers may take.")
    ] = 30.0,
    body_timeout: Annotated[float, typer.Option(help="Seconds a request's body may take.")] = (
        120.0
    ),
    offload_mb: Annotated[
        float, typer.Option(help="Bodies this large are parsed and rendered off the event loop.")
    ] = 1.0,
    served_model: Annotated[
        str, typer.Option(help="Model name the engine server knows (vllm, sglang, upstream).")
    ] = "",
    fetch_image_urls: Annotated[
        bool,
        typer.Option(help="Fetch images given by http(s) URL (off: such calls get a 400)."),
    ] = False,
    judge_engine: Annotated[
        str | None,
        typer.Option(
            help="Engine answering judge-role keys (benchmark graders' LLM judge), and "
            "user-role keys unless --user-engine is given. SPEC: " + ENGINE_SPEC_HELP + "."
        ),
    ] = None,
    user_engine: Annotated[
        str | None,
        typer.Option(help="Engine answering user-role keys (simulated users). SPEC as above."),
    ] = None,
    tool_format: Annotated[
        str | None,
        typer.Option(
            help="Tool-call format NAME instead of the model family's detected one "
            "(like vLLM's --tool-call-parser; docs/rendering.md lists them)."
        ),
    ] = None,
    reasoning_format: Annotated[
        str | None,
        typer.Option(
            help="Reasoning format NAME instead of the detected one ('none': no reasoning)."
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            help="Worker processes sharing the two ports, one core each "
            "(more than 1 needs a postgresql:// store).",
            min=1,
        ),
    ] = 1,
) -> None:
    """Serve OpenAI Chat, OpenAI Responses and Anthropic Messages, recording every call."""
    from openforge.gateway.launch import (
        build_engine,
        check_engine_urls,
        resolve_model_dir,
        role_engines,
    )

    if engine not in _ENGINES:
        _fail(f"--engine must be one of {', '.join(_ENGINES)}, not {engine!r}")
    check_engine_urls(engine, url or [], judge_engine, user_engine, _fail)
    model_dir = resolve_model_dir(model, _fail)
    _check_formats(tool_format, reasoning_format)

    from openforge.gateway.limits import Limits
    from openforge.gateway.server import Gateway, serve
    from openforge.store.base import StoreError
    from openforge.store.location import open_store

    _check_store(store, workers)
    token, where = _admin_token()
    ready = functools.partial(_announce, where)
    admin_port = (port + 1 if port else 0) if admin_port is None else admin_port
    limits = Limits(
        max_body_bytes=int(max_body_mb * (1 << 20)),
        header_timeout_s=header_timeout,
        body_timeout_s=body_timeout,
        offload_bytes=int(offload_mb * (1 << 20)),
        fetch_image_urls=fetch_image_urls,
    )

    def serve_one(index: int, sockets: tuple[socket.socket, socket.socket] | None) -> None:
        eng = build_engine(
            engine,
            model_dir,
            script,
            url or [],
            api,
            max_context,
            _fail,
            served_model,
            (tool_format, reasoning_format),
        )
        roles = role_engines(judge_engine, user_engine, model_dir, _fail)
        try:
            st = open_store(store)
        except StoreError as exc:
            _fail(str(exc))
            return
        serve(
            lambda: Gateway(
                eng,
                st,
                model=model_dir,
                admin_token=token,
                host=host,
                port=port,
                admin_host=admin_host,
                admin_port=admin_port,
                allow_anonymous=allow_anonymous,
                public_url=public_url,
                log_level="info",
                limits=limits,
                roles=roles,
                sockets=sockets,
                tool_format=tool_format,
                reasoning_format=reasoning_format,
            ),
            on_ready=ready if index == 0 else None,
        )

    if workers == 1:
        serve_one(0, None)
        return
    _serve_workers(workers, (host, port), (admin_host, admin_port), serve_one)


def _check_store(store: str, workers: int) -> None:
    """Refuse a PostgreSQL store that cannot be reached, and workers without a shared store."""
    from openforge.store.location import is_postgres_url

    if is_postgres_url(store):
        _check_postgres(store)
    if workers > 1 and not is_postgres_url(store):
        _fail(
            "--workers needs the shared PostgreSQL store (--store postgresql://…): "
            "a rollout's calls may reach any worker (docs/gateway.md, Workers)"
        )


def _serve_workers(
    workers: int,
    model_addr: tuple[str, int],
    admin_addr: tuple[str, int],
    serve_one: Callable[[int, tuple[socket.socket, socket.socket] | None], None],
) -> None:
    """Bind both ports once and serve them from ``workers`` processes; exit with their code."""
    from openforge.gateway.server import bind_socket
    from openforge.gateway.workers import run_workers

    (host, port), (admin_host, admin_port) = model_addr, admin_addr
    try:
        shared = (bind_socket(host, port), bind_socket(admin_host, admin_port))
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port} / {admin_host}:{admin_port}: {exc}")
        return
    raise typer.Exit(run_workers(workers, shared, serve_one))


def _check_postgres(url: str) -> None:
    """Stop at once, before any engine loads, when the ``--store`` database cannot be
    reached or refuses the login."""
    import psycopg

    from openforge.store.pgschema import connect_reason, redact, with_timeout

    try:
        psycopg.connect(with_timeout(url)).close()
    except psycopg.Error as exc:
        _fail(
            f"--store {redact(url)}: cannot connect ({connect_reason(url, exc)}); start "
            "PostgreSQL there, fix the URL, or pass a SQLite file (--store calls.sqlite)"
        )


def register(app: typer.Typer) -> None:
    """Add ``openforge gateway`` to the ``openforge`` app."""
    app.command("gateway")(gateway)
