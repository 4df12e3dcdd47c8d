"""``openforge k8s …``: render the gateway's manifests; remove orphaned sandbox pods."""

from __future__ import annotations

import asyncio

import typer

from openforge.cli_options import DEFAULT_GATEWAY_PORT

k8s_app = typer.Typer(help="Kubernetes: manifests for the gateway, garbage collection.")
_URL = typer.Option(None, help="engine server URL (repeat for several)")


@k8s_app.command("manifests")
def manifests(
    namespace: str = typer.Option("openforge", help="namespace of the gateway and sandboxes"),
    image: str = typer.Option("localhost/openforge:latest", help="gateway image"),
    port: int = typer.Option(
        DEFAULT_GATEWAY_PORT, help="gateway port of the model API (the admin API: PORT+1)"
    ),
    replicas: int = typer.Option(1, min=1, help="gateway replicas (more than 1: PostgreSQL)"),
    model: str = typer.Option("smollm2-135m", help="model the gateways serve"),
    engine: str = typer.Option("vllm", help="engine kind: vllm, sglang, upstream, ..."),
    url: list[str] | None = _URL,
    store_secret: str = typer.Option(
        "openforge-store", help="Secret whose key 'url' is the store URL"
    ),
) -> None:
    """Print the gateway's ServiceAccount, RBAC, Deployment, Service, PodDisruptionBudget
    and sandbox policy (YAML)."""
    import yaml

    from openforge.sandboxes.manifests import gateway_manifests

    docs = gateway_manifests(
        namespace=namespace,
        image=image,
        port=port,
        replicas=replicas,
        model=model,
        engine=engine,
        engine_urls=tuple(url or ()),
        store_secret=store_secret,
    )
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
