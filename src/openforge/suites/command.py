"""``openforge tasks check`` (the oracle check) and ``openforge images build``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from openforge.cli_options import (
    DEFAULT_BACKEND,
    DEFAULT_CONTAINER_ENGINE,
    BackendOpt,
    ClawEvalFixturesOpt,
    ContainerEngineOpt,
    ExcludeOpt,
    LimitOpt,
    OldEngineOpt,
    SampleOpt,
    SeedOpt,
    TaskOpt,
    container_engine,
)

if TYPE_CHECKING:
    from openforge.suites.loading import TaskSet
    from openforge.suites.selection import TaskSelection

__all__ = ["load_for_command", "register", "task_selection"]

tasks_app = typer.Typer(help="Tasks: check that each task's verifier and reference agree.")
images_app = typer.Typer(help="Task images: build (and push) each task's own environment.")

TasksOpt = Annotated[str, typer.Option("--tasks", help="Task dir, suite dir or bundled suite.")]


def task_selection(
    task: list[str] | None,
    exclude: list[str] | None,
    limit: int | None,
    sample: int | None,
    seed: int,
) -> TaskSelection:
    """The selection the ``--task/--exclude/--limit/--sample/--seed`` options make."""
    from openforge.suites.selection import TaskSelection

    return TaskSelection(tuple(task or ()), tuple(exclude or ()), limit, sample, seed)


def load_for_command(
    tasks: str,
    selection: TaskSelection,
    split: str | None,
    say: Callable[[str], None],
    claweval_fixtures: Path | None = None,
) -> TaskSet:
    """The tasks a command runs: loaded, selected, each problem said once through ``say``.

    Without a selection every task that did not load is named (files a suite's repository
    leaves out, once for all tasks); with one, those are counted in a line (the tasks chosen
    loaded), unless nothing matched, when they may be why. A selection that keeps nothing is
    a usage error naming its option (exit status 2). ``claweval_fixtures`` is the directory
    ClawEval's left-out fixtures are read from (``--claweval-fixtures``), for this process.
    """
    from openforge.suites.claweval.loader import FIXTURES_ENV
    from openforge.suites.loading import error_lines

    if claweval_fixtures is not None:
        if not claweval_fixtures.is_dir():
            raise typer.BadParameter(
                f"{claweval_fixtures} is not a directory", param_hint="'--claweval-fixtures'"
            )
        os.environ[FIXTURES_ENV] = str(claweval_fixtures.resolve())
    from openforge.suites.selection import SelectionError, load_selected

    try:
        loaded = load_selected(tasks, selection, split)
    except SelectionError as exc:
        from openforge.suites.loading import load_tasks

        for line in error_lines(load_tasks(tasks, split).errors):
            say(line)
        raise typer.BadParameter(exc.problem, param_hint=f"'{exc.option}'") from None
    if selection.everything or not loaded.errors:
        for line in error_lines(loaded.errors):
            say(line)
    else:
        say(
            f"{len(loaded.errors)} task(s) under {tasks} did not load; they are named when "
            "run without --task/--exclude/--limit/--sample"
        )
    for task in loaded.tasks:
        for note in task.notes:
            say(f"note: {task.path}: {note}")
    return loaded


@tasks_app.command("check")
def check(
    tasks: TasksOpt,
    backend: BackendOpt = DEFAULT_BACKEND,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Ignore cached verdicts.")] = False,
    allow_task_internet: Annotated[
        bool, typer.Option("--allow-task-internet", help="Open network for tasks that ask.")
    ] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="Tasks at once.")] = 4,
    task: TaskOpt = None,
    exclude: ExcludeOpt = None,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    claweval_fixtures: ClawEvalFixturesOpt = None,
) -> None:
    """Run each task's reference solution (must score 1) and a no-op (must not); print a table.

    Check on the backend the rollouts will use. Exit status 1 when any task is quarantined.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from openforge.progress import LiveCounts, concurrency_warning, cores, live_display
    from openforge.sandboxes import SandboxError, create_backend
    from openforge.suites.loading import warning_lines
    from openforge.tasks.oracle import CheckResult, check_tasks

    console = Console(soft_wrap=True)
    selection = task_selection(task, exclude, limit, sample, seed)
    loaded = load_for_command(
        tasks, selection, None, lambda s: console.print(s, markup=False), claweval_fixtures
    )
    table = Table("task", "oracle", "no-op", "verdict", "reason")

    progress = Console(stderr=True, soft_wrap=True)
    live = LiveCounts(len(loaded.tasks), 0, noun="tasks", statuses=("ok", "quarantined"))
    warning = concurrency_warning(concurrency, cores())
    if warning:
        progress.print(f"warning: {warning}", markup=False)

    def checked(res: CheckResult) -> None:
        live.record("ok" if res.ok else "quarantined", 1.0 if res.ok else 0.0)

    async def go() -> int:
        box_backend = create_backend(backend)
        try:
            with live_display(live, progress):
                results = await check_tasks(
                    box_backend, loaded.tasks, use_cache=not no_cache,
                    internet=allow_task_internet, concurrency=concurrency, on_result=checked,
                )  # fmt: skip
        finally:
            await box_backend.close()
        for res in results:
            verdict = "ok" if res.ok else "[red]quarantined[/]"
            table.add_row(
                escape(res.task_id),
                "-" if res.oracle is None else f"{res.oracle:g}",
                "-" if res.noop is None else f"{res.noop:g}",
                verdict + (" (cached)" if res.cached else ""),
                escape(res.reason),
            )
        return sum(not r.ok for r in results)

    try:
        bad = asyncio.run(go())
    except SandboxError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    console.print(table)
    for line in warning_lines(loaded.tasks):
        console.print(f"warning: {line}", markup=False)
    asked = [t.id for t in loaded.tasks if t.wants_internet]
    if asked:
        how = "given an open network" if allow_task_internet else "checked without a network"
        console.print(f"tasks asking for the internet ({how}): {', '.join(asked)}", markup=False)
    raise typer.Exit(1 if bad else 0)


@images_app.command("build")
def build(
    tasks: TasksOpt,
    container_engine_: ContainerEngineOpt = DEFAULT_CONTAINER_ENGINE,
    push: Annotated[
        str | None, typer.Option("--push", help="Push to REGISTRY/… (a registry host).")
    ] = None,
    engine: OldEngineOpt = None,
    task: TaskOpt = None,
    exclude: ExcludeOpt = None,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    claweval_fixtures: ClawEvalFixturesOpt = None,
) -> None:
    """Build every task's own image and its sidecars' (cached by content); print each task id
    (TASK/SERVICE for a sidecar) and its image reference."""
    import shutil

    from openforge.sandboxes import SandboxError
    from openforge.sandboxes.images import ImageBuilder, push_image
    from openforge.suites.loading import warning_lines
    from openforge.tasks.episode import task_image

    engine_name = container_engine(container_engine_, engine)
    path = shutil.which(engine_name)
    if path is None:
        typer.echo(f"openforge images build: {engine_name} is not installed", err=True)
        raise typer.Exit(2)
    builder = ImageBuilder(path)
    selection = task_selection(task, exclude, limit, sample, seed)
    loaded = load_for_command(
        tasks, selection, None, lambda s: typer.echo(s, err=True), claweval_fixtures
    )
    for line in warning_lines(loaded.tasks):
        typer.echo(f"warning: {line}", err=True)

    async def go() -> None:
        for one in loaded.tasks:
            images = [(one.id, task_image(one))]
            # Its compose sidecars' own builds too: a pod pulls them as it pulls the task's
            # (a sidecar naming a published image is pulled from where it is published).
            services = one.environment.services if one.environment else ()
            images += [(f"{one.id}/{svc.name}", svc.image) for svc in services
                       if svc.image.dockerfile is not None]  # fmt: skip
            for what, image in images:
                if image is None:
                    continue
                ref = await builder.ensure(image)
                if push:
                    ref = await push_image(path, ref, push)
                typer.echo(f"{what}\t{ref}")

    try:
        asyncio.run(go())
    except SandboxError as exc:
        typer.echo(f"openforge images build: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    """Add ``tasks`` and ``images`` to the ``openforge`` app."""
    app.add_typer(tasks_app, name="tasks")
    app.add_typer(images_app, name="images")
