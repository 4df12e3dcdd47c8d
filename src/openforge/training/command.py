"""``openforge train CONFIG`` and ``openforge quickstart``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def train(
    config: Annotated[Path | None, typer.Argument(help="YAML config (every key optional).")] = None,
    steps: Annotated[int | None, typer.Option(help="Override the config's steps.")] = None,
    run_dir: Annotated[str | None, typer.Option(help="Override the config's run_dir.")] = None,
    judge_engine: Annotated[
        str | None,
        typer.Option(
            help="Engine for the started gateway's judge-role (and user-role) keys; SPEC as "
            "for `openforge gateway --judge-engine` (overrides the config's judge_engine)."
        ),
    ] = None,
    user_engine: Annotated[
        str | None,
        typer.Option(help="Engine for its user-role keys (simulated users); SPEC as above."),
    ] = None,
) -> None:
    """GRPO: rollouts through the gateway, updates, weight sync; resumes from the run dir."""
    import asyncio
    import logging

    from openforge.training.config import ConfigError, load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per admin call
    overrides: dict[str, object] = {}
    if steps is not None:
        overrides["steps"] = steps
    if run_dir is not None:
        overrides["run_dir"] = run_dir
    if judge_engine is not None:
        overrides["judge_engine"] = judge_engine
    if user_engine is not None:
        overrides["user_engine"] = user_engine
    try:
        cfg = load_config(config, **overrides)
    except ConfigError as exc:
        _fail(str(exc))
        return
    from openforge.models.registry import resolve_model
    from openforge.training.loop import run_loop
    from openforge.training.session import open_session
    from openforge.training.teacher import sft_warmup, teacher_samples

    if cfg.sft_epochs and cfg.harness != "claw":
        _fail(f"{cfg.source}: sft_epochs: the SFT warm-up plays claw tool calls; "
              f"set harness: claw or sft_epochs: 0")  # fmt: skip
        return

    async def main() -> None:
        async with open_session(cfg) as env:
            warmup = None
            if cfg.sft_epochs:
                model_dir = resolve_model(cfg.model)
                samples = await teacher_samples(cfg, env.train_tasks, model_dir)
                warmup = sft_warmup(samples) if samples else None
            summary = await run_loop(cfg, env, warmup=warmup)
        typer.echo(
            f"done: {summary.steps_done} steps, weight version {summary.version}, "
            f"{summary.skipped} skipped; metrics in {Path(cfg.run_dir) / 'metrics.jsonl'}"
        )

    try:
        asyncio.run(main())
    except ConfigError as exc:
        _fail(str(exc))


def quickstart(
    run_dir: Annotated[str, typer.Option(help="Where the run and its report go.")] = (
        "runs/quickstart"
    ),
    steps: Annotated[int, typer.Option(help="GRPO steps.")] = 3,
) -> None:
    """SmolLM2-135M + the claw agent on claw-drill: evaluate, train a few steps, re-evaluate."""
    from openforge.training.quickstart import run_quickstart

    try:
        report = run_quickstart(run_dir=run_dir, steps=steps)
    except RuntimeError as exc:
        _fail(str(exc))
        return
    typer.echo(f"report: {report}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``openforge`` app."""
    app.command()(train)
    app.command()(quickstart)
