"""``openforge harness …``: list adapters, record a harness's fingerprint, check it for changes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from openforge.cli_options import (
    DEFAULT_CONTAINER_ENGINE,
    ContainerEngineOpt,
    HarnessOptionOpt,
    OldEngineOpt,
    OldOptionOpt,
    container_engine,
    harness_options,
)

__all__ = ["register"]

harness_app = typer.Typer(
    help="Harness adapters: fingerprints of their call patterns.", no_args_is_help=True
)

_MODEL = "smollm2-135m"  # the registry's default, resolved by probe()
ModelOpt = Annotated[
    str, typer.Option(help="Model the gateway renders with: a registry name or a HF directory.")
]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"openforge harness: {message}", err=True)
    raise typer.Exit(code)


def _record(name: str, model: str, options: dict[str, Any]) -> dict[str, Any]:
    """Run the harness on hello-file with its scripted solution; its fingerprint."""
    import asyncio
    import tempfile

    from openforge.harnesses.base import HarnessError
    from openforge.harnesses.fingerprint import fingerprint
    from openforge.harnesses.registry import get_harness
    from openforge.models.registry import ModelNotFound, resolve_model
    from openforge.probing.probe import SOLUTIONS, probe

    try:
        harness = get_harness(name, **options)
        model_dir = resolve_model(model)
    except (HarnessError, ModelNotFound) as exc:
        _fail(str(exc))
        raise
    if name not in SOLUTIONS:
        _fail(f"no scripted solution for harness {name!r} (known: {', '.join(SOLUTIONS)})")
    with tempfile.TemporaryDirectory(prefix="openforge-fingerprint-") as tmp:
        run = asyncio.run(probe(harness, SOLUTIONS[name], Path(tmp), model=model_dir))
    res = run.result
    if res.status != "completed" or res.reward != 1.0 or not run.calls:
        log = ""
        if res.rollout_id is not None:
            log = f" (status {res.status}, reward {res.reward}, error {res.error})"
        _fail(f"{name} did not complete its scripted solution{log}", 1)
    return fingerprint(harness.name, harness.version, run.calls)


def fingerprint_cmd(
    name: Annotated[str, typer.Argument(help="Harness name (see `openforge harness list`).")],
    model: ModelOpt = _MODEL,
    harness_option: HarnessOptionOpt = None,
    option: OldOptionOpt = None,
    out: Annotated[Path | None, typer.Option(help="Directory for NAME-VERSION.json.")] = None,
) -> None:
    """Run NAME against a scripted gateway and store its call-pattern fingerprint."""
    import orjson

    from openforge.harnesses.fingerprint import FINGERPRINT_DIR, fingerprint_path

    fp = _record(name, model, harness_options(harness_option, option))
    path = fingerprint_path(fp["harness"], fp["version"], out or FINGERPRINT_DIR)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(fp, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    typer.echo(
        f"{fp['harness']} {fp['version']}: {len(fp['calls'])} calls, "
        f"first prompt {fp['first_prompt_tokens']} tokens, hash {fp['hash']} -> {path}"
    )


def check_cmd(
    name: Annotated[str, typer.Argument(help="Harness name.")],
    model: ModelOpt = _MODEL,
    harness_option: HarnessOptionOpt = None,
    option: OldOptionOpt = None,
    baseline: Annotated[
        Path | None, typer.Option(help="Baseline directory (default: the stored fingerprints).")
    ] = None,
) -> None:
    """Compare NAME's fresh fingerprint with its stored baseline (exit 1 on change)."""
    from openforge.harnesses.fingerprint import (
        FINGERPRINT_DIR,
        compare,
        fingerprint_path,
        load_fingerprint,
    )

    fresh = _record(name, model, harness_options(harness_option, option))
    root = baseline or FINGERPRINT_DIR
    stored = load_fingerprint(fresh["harness"], fresh["version"], root)
    if stored is None:
        path = fingerprint_path(fresh["harness"], fresh["version"], root)
        _fail(f"no baseline {path}; record one with `openforge harness fingerprint {name}`")
        return
    changes = compare(stored, fresh)
    if not changes:
        typer.echo(f"{fresh['harness']} {fresh['version']}: no change (hash {fresh['hash']})")
        return
    typer.echo(
        f"{fresh['harness']} {fresh['version']}: the call pattern changed "
        f"({stored['hash']} -> {fresh['hash']}):"
    )
    for line in changes:
        typer.echo(f"  {line}")
    raise typer.Exit(1)


def image_cmd(
    name: Annotated[str, typer.Argument(help="Harness name (see openforge harness list).")],
    container_engine_: ContainerEngineOpt = DEFAULT_CONTAINER_ENGINE,
    push: Annotated[
        str | None, typer.Option(help="Push to REGISTRY/openforge-harness:… (a registry host).")
    ] = None,
    harness_option: HarnessOptionOpt = None,
    option: OldOptionOpt = None,
    engine: OldEngineOpt = None,
) -> None:
    """Build the image of a harness's portable install (what Kubernetes pods mount at
    /opt/openforge/harness); print its reference, pushed when --push is given."""
    import asyncio
    import shutil

    from openforge.harnesses.base import HarnessError
    from openforge.harnesses.portable import Portable, build_portable
    from openforge.harnesses.registry import get_harness
    from openforge.sandboxes.base import SandboxError
    from openforge.sandboxes.images import build_dir_image, push_image

    engine_name = container_engine(container_engine_, engine)
    path = shutil.which(engine_name)
    if path is None:
        _fail(f"{engine_name} is not installed")
        return
    try:
        harness = get_harness(name, **harness_options(harness_option, option))
        if not isinstance(harness, Portable):
            _fail(f"{name} needs no portable install (it is copied into each sandbox)")
            return
        root = build_portable(harness.portable())
        ref = asyncio.run(build_dir_image(path, root, f"localhost/openforge-harness:{root.name}"))
        if push:
            ref = asyncio.run(push_image(path, ref, push))
    except (HarnessError, SandboxError) as exc:
        _fail(str(exc), 1)
        raise
    typer.echo(ref)


def list_cmd() -> None:
    """Every registered harness: name, pinned version, dialect, stored fingerprint, install
    command (or the options it needs, given with -O KEY=VALUE)."""
    from openforge.harnesses.base import HarnessError
    from openforge.harnesses.fingerprint import harness_metadata
    from openforge.harnesses.registry import (
        get_harness,
        harness_factory,
        harness_names,
        required_options,
    )

    for name in harness_names():
        try:
            needs = required_options(name)
            if needs:
                # Built per task from its options: show what the class declares.
                cls = harness_factory(name)
                wanted = " ".join(f"-O {k}=…" for k in needs)
                version, dialect = getattr(cls, "version", "-"), getattr(cls, "dialect", "-")
                typer.echo(f"{name}\t{version}\t{dialect}\t-\tneeds {wanted}")
                continue
            h = get_harness(name)
        except Exception as exc:  # one adapter that cannot load must not hide the others
            why = str(exc) if isinstance(exc, HarnessError) else f"{type(exc).__name__}: {exc}"
            typer.echo(f"{name}\t-\t-\t-\tunavailable: {why}")
            continue
        meta = harness_metadata(h.name, h.version)
        typer.echo(
            f"{name}\t{h.version}\t{h.dialect}\t{meta['harness_fingerprint'] or '-'}\t"
            f"{h.install_command()}"
        )


def register(app: typer.Typer) -> None:
    """Add ``openforge harness`` to the ``openforge`` app."""
    harness_app.command("fingerprint")(fingerprint_cmd)
    harness_app.command("check")(check_cmd)
    harness_app.command("list")(list_cmd)
    harness_app.command("image")(image_cmd)
    app.add_typer(harness_app, name="harness")
