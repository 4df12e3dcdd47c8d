"""``openforge k8s …``: render the gateway's manifests; remove orphaned sandbox pods."""

from __future__ import annotations

import asyncio
from typing import NoReturn

import typer

from openforge.cli_options import DEFAULT_GATEWAY_PORT
from openforge.sandboxes.manifests import ADMIN_SECRET, STORE_SECRET

k8s_app = typer.Typer(help="Kubernetes: manifests for the gateway, garbage collection.")
# Engines a cluster's gateway can use: engine servers it reaches by URL, an upstream API, or
# the local engine inside the gateway's own pod (scripted is for tests, not clusters).
_CLUSTER_ENGINES = ("vllm", "sglang", "upstream", "local")


_URL = typer.Option(
    None,
    "--url",
    help="URL of an engine server as the gateway pods reach it, e.g. "
    "http://vllm-0.vllm.openforge.svc:8000 (repeat for several; required for vllm, "
    "sglang and upstream).",
)


def _fail(message: str) -> NoReturn:
    typer.echo(f"openforge k8s manifests: {message}", err=True)
    raise typer.Exit(2)


@k8s_app.command("manifests")
def manifests(
    url: list[str] | None = _URL,
    engine: str = typer.Option("vllm", help="model engine: vllm, sglang, upstream or local"),
    api: str | None = typer.Option(None, help="--engine upstream: openai or anthropic"),
    served_model: str = typer.Option(
        "", help="model name the engine servers know (vllm, sglang, upstream)"
    ),
    model: str = typer.Option(
        "smollm2-135m",
        help="model the gateways render with: a registry name or a directory in the image",
    ),
    namespace: str = typer.Option("openforge", help="namespace of the gateway and sandboxes"),
    image: str = typer.Option("localhost/openforge:latest", help="gateway image"),
    port: int = typer.Option(
        DEFAULT_GATEWAY_PORT, help="gateway port of the model API (the admin API: PORT+1)"
    ),
    replicas: int = typer.Option(1, min=1, help="gateway replicas (more than 1: PostgreSQL)"),
    store_secret: str = typer.Option(STORE_SECRET, help="Secret whose key 'url' is the store URL"),
    admin_secret: str = typer.Option(
        ADMIN_SECRET, help="Secret whose key 'token' is the admin API's token"
    ),
    sandbox_image: str | None = typer.Option(
        None,
        help="sandbox image the nodes pull (deploy/build-sandbox-image.sh, pushed) for "
        "rollouts run in the gateway pod with --backend kubernetes",
    ),
) -> None:
    """Print the gateway's ServiceAccount, RBAC, Deployment, Service, PodDisruptionBudget
    and sandbox policy (YAML), headed by the commands that make the two Secrets it reads."""
    import yaml

    from openforge.engines.base import EngineError
    from openforge.engines.registry import EngineConfig
    from openforge.sandboxes.manifests import EngineArgs, gateway_manifests, secret_commands

    if engine not in _CLUSTER_ENGINES:
        _fail(f"--engine must be one of {', '.join(_CLUSTER_ENGINES)}, not {engine!r}")
    urls = tuple(url or ())
    try:
        # The gateway's own check of its engine options, so a Deployment it would refuse
        # (say --engine vllm without --url) is never printed.
        EngineConfig(kind=engine, model=model, urls=list(urls), api=api)
    except EngineError as exc:
        _fail(str(exc))
    docs = gateway_manifests(
        namespace=namespace,
        image=image,
        port=port,
        replicas=replicas,
        model=model,
        engine=EngineArgs(engine, urls, api, served_model),
        store_secret=store_secret,
        admin_secret=admin_secret,
        sandbox_image=sandbox_image,
    )
    header = ["# Make the Secrets this Deployment reads first (docs/sandboxes.md, Kubernetes):"]
    header += [f"#   {line}" for line in secret_commands(namespace, store_secret, admin_secret)]
    typer.echo("\n".join(header))
    typer.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


@k8s_app.command("gc")
def gc(
    namespace: str = typer.Option("openforge", help="namespace of the sandbox pods"),
    context: str | None = typer.Option(None, help="kubeconfig context (default: current)"),
    run: str | None = typer.Option(None, help="only this run's pods (default: every run's)"),
) -> None:
    """Delete OpenForge sandbox pods and their Secrets left behind by crashed runs."""
    from openforge.sandboxes.base import SandboxError
    from openforge.sandboxes.kubernetes import KubernetesBackend

    async def go() -> int:
        backend = KubernetesBackend(namespace=namespace, context=context, run_id=run)
        try:
            return await backend.gc(all_runs=run is None)
        finally:
            await backend.close()

    try:
        deleted = asyncio.run(go())
    except (SandboxError, OSError) as exc:
        typer.echo(f"openforge k8s gc: {exc}", err=True)
        raise typer.Exit(1) from None
    except Exception as exc:  # kubeconfig and API errors: one line, not a trace
        typer.echo(f"openforge k8s gc: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"deleted {deleted} sandbox pod(s) in namespace {namespace}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``openforge`` app."""
    app.add_typer(k8s_app, name="k8s")
