"""``openforge train CONFIG`` and ``openforge quickstart``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from openforge.rollouts.command import (
    PriceInputOpt,
    PriceOutputOpt,
    PriceSandboxOpt,
    PriceTrainOpt,
    prices,
)


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
    price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None,
    price_sandbox_hour: PriceSandboxOpt = None,
    price_train: PriceTrainOpt = None,
) -> None:
    """GRPO: rollouts through the gateway, updates, weight sync; resumes from the run dir.
    Writes summary.json (evaluations, cost) and report.html into the run directory."""
    import asyncio
    import logging
    import time

    from rich.console import Console
    from rich.logging import RichHandler

    from openforge.training.config import ConfigError, load_config

    console = Console(stderr=True)
    # Log lines print above the progress bar, not through it.
    handler = RichHandler(console=console, show_path=False, markup=False)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", handlers=[handler])
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per admin call
    overrides = _overrides(steps, run_dir, judge_engine, user_engine)
    try:
        cfg = load_config(config, **overrides)
    except ConfigError as exc:
        _fail(str(exc))
        return
    from openforge.models.registry import resolve_model
    from openforge.training.loop import checkpoint_extra, latest_checkpoint, run_loop
    from openforge.training.progress import TrainProgress
    from openforge.training.report import write_run_report
    from openforge.training.session import open_session
    from openforge.training.teacher import TEACHER_HARNESSES, sft_warmup, teacher_samples

    if cfg.sft_epochs and cfg.harness not in TEACHER_HARNESSES:
        _fail(f"{cfg.source}: sft_epochs: the SFT warm-up plays the reference solutions as "
              f"bash tool calls of {' or '.join(TEACHER_HARNESSES)}; set harness to one of "
              "them or sft_epochs: 0")  # fmt: skip
        return
    price = prices(price_input, price_output, price_sandbox_hour, price_train)
    started = time.perf_counter()

    async def main() -> None:
        async with open_session(cfg) as env:
            warmup = None
            last = checkpoint_extra(cfg.run_dir)
            if cfg.sft_epochs and not (last and last.get("warmed_up", True)):
                model_dir = resolve_model(cfg.model)
                samples = await teacher_samples(cfg, env.train_tasks, model_dir)
                warmup = sft_warmup(samples) if samples else None
            done = sum(1 for r in env.metrics.read() if r.get("kind") in ("train", "skip"))
            with TrainProgress(cfg.steps, console, done=min(done, cfg.steps)) as bar:
                env.metrics.listeners.append(bar.record)
                summary = await run_loop(cfg, env, warmup=warmup)
        store = Path(cfg.store) if cfg.store else Path(cfg.run_dir) / "store.db"
        report = await write_run_report(cfg, store, time.perf_counter() - started, price)
        typer.echo(
            f"done: {summary.steps_done} steps, weight version {summary.version}, "
            f"{summary.skipped} skipped; metrics in {Path(cfg.run_dir) / 'metrics.jsonl'}, "
            f"cost in {Path(cfg.run_dir) / 'summary.json'}, report {report}"
        )

    try:
        asyncio.run(main())
    except ConfigError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        typer.echo(_resume_hint(latest_checkpoint(cfg.run_dir), config, run_dir), err=True)
        raise typer.Exit(130) from None


def _overrides(
    steps: int | None, run_dir: str | None, judge_engine: str | None, user_engine: str | None
) -> dict[str, object]:
    """The config keys the command line overrides (only the options given)."""
    given = {
        "steps": steps,
        "run_dir": run_dir,
        "judge_engine": judge_engine,
        "user_engine": user_engine,
    }
    return {key: value for key, value in given.items() if value is not None}


def _resume_hint(ckpt: Path | None, config: Path | None, run_dir: str | None) -> str:
    """What an interrupted run tells the user: the command that resumes it, and from where."""
    again = (
        "openforge train"
        + (f" {config}" if config else "")
        + (f" --run-dir {run_dir}" if run_dir else "")
    )
    where = (
        f"from {ckpt} (finished phases are skipped)"
        if ckpt
        else "from the start (no checkpoint yet; recorded teacher and evaluation rollouts are kept)"
    )
    return f"interrupted: rerun `{again}` to resume {where}"


def quickstart(
    run_dir: Annotated[str, typer.Option(help="Where the run and its report go.")] = (
        "runs/quickstart"
    ),
    steps: Annotated[int, typer.Option(help="GRPO steps.")] = 3,
    engine: Annotated[
        str,
        typer.Option(
            help="local (started for you), vllm (give --engine-url or --vllm-python) or "
            "sglang (give --engine-url)."
        ),
    ] = "local",
    engine_url: Annotated[
        list[str] | None,
        typer.Option(help="URL of the vllm/sglang server serving SmolLM2-135M's weights."),
    ] = None,
    served_model: Annotated[
        str, typer.Option(help="The model name that server serves them as.")
    ] = "",
    vllm_python: Annotated[
        str,
        typer.Option(
            envvar="OPENFORGE_VLLM_PYTHON",
            help="A Python with vLLM installed (e.g. .venv-vllm/bin/python): --engine vllm "
            "without --engine-url starts its server on SmolLM2-135M for the run.",
        ),
    ] = "",
    price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None,
    price_sandbox_hour: PriceSandboxOpt = None,
    price_train: PriceTrainOpt = None,
) -> None:
    """SmolLM2-135M + the claw agent on claw-drill: evaluate, train a few steps, re-evaluate."""
    from openforge.training.quickstart import run_quickstart

    price = prices(price_input, price_output, price_sandbox_hour, price_train)
    if engine not in ("local", "vllm", "sglang"):
        _fail(f"--engine must be local, vllm or sglang, not {engine!r}")
    try:
        report = run_quickstart(
            run_dir=run_dir,
            steps=steps,
            prices=price,
            engine=engine,  # type: ignore[arg-type]
            engine_urls=engine_url or [],
            served_model=served_model,
            vllm_python=vllm_python,
        )
    except RuntimeError as exc:
        _fail(str(exc))
        return
    typer.echo(f"report: {report}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``openforge`` app."""
    app.command()(train)
    app.command()(quickstart)
