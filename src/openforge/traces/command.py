"""``openforge traces export|show|stats|flag``: samples from a store, for trainers and for
people, and the reward-hack monitor run again over it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from openforge.store.schemas import Blob, RolloutSelection
    from openforge.traces.samples import TraceOptions
    from openforge.traces.selection import SplitCounts
    from openforge.traces.source import CallSource, StorePlan

_STORE = typer.Option(..., "--store", help="The store: a SQLite file or a postgresql:// URL.")
_OUT = typer.Option(..., "--out", help="Output file (.parquet, or .pkl for a veRL DataProto).")
_HTML = typer.Option(None, "--html", help="Also write a self-contained HTML page.")
_TOKENIZER = typer.Option(
    None, "--tokenizer", help="Model dir to decode ids with (default: the served model)."
)
_FLAGGED = typer.Option(
    "drop",
    "--flagged",
    help="Rollouts the reward-hack monitor flagged: drop (no samples), zero (reward 0) or keep.",
)
_RULES = typer.Option(
    None, "--rules", help="A TOML rule file: adds to, replaces or disables the defaults."
)
_RUN_DIR = typer.Option(
    None,
    "--run-dir",
    help="An orchestrator run directory (or one above several) whose transcripts the rules "
    "read too (repeatable).",
)
_INCLUDE_RUNNING = typer.Option(
    False, "--include-running", help="Also use rollouts not finished yet (created or running)."
)
_MASK_FORKS = typer.Option(
    False,
    "--mask-forks",
    help="Train no branch beyond a rollout's first (a history edit, compaction, subagent).",
)
_FLAG_SEVERITY = typer.Option(
    "medium", "--flag-severity", help="The least severe flag --flagged acts on: low|medium|high."
)


_RUN = typer.Option(
    None, "--run", help="Only rollouts of this orchestrator run id (repeatable; default: all)."
)
_SPLIT = typer.Option(
    None,
    "--split",
    help="Only rollouts of this split: train, test, a suite's own, none (not recorded) or "
    "all (repeatable; default: train and none, the training rollouts).",
)
_TASK = typer.Option(None, "--task", help="Only rollouts of this task id (repeatable).")
_ALLOW_HELD_OUT = typer.Option(
    False,
    "--allow-held-out",
    help="Export held-out rollouts (a --split other than train) as training data anyway.",
)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC while a CLI command plans and writes a store's samples.

    Each collection walks every live list of token ids (about a third of planning time in
    ``bench/traces.py``), and nothing is freed: the command holds every plan until it has
    written them.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


async def _with_store(
    path: str, options: TraceOptions, selection: RolloutSelection
) -> tuple[StorePlan, SplitCounts]:
    plan, _, counts = await _with_images(path, options, None, selection)
    return plan, counts


async def _with_images(
    path: str,
    options: TraceOptions,
    fmt: str | None,
    selection: RolloutSelection,
    refuse_held_out: bool = False,
) -> tuple[StorePlan, dict[str, Blob], SplitCounts]:
    """The plan of the store's ``selection``, for a ``verl`` or ``sft`` export the images
    it shows, and its rollouts by split. ``refuse_held_out``: exit, naming the flag that
    allows it, when the selection takes held-out rollouts."""
    from openforge.store.base import StoreError
    from openforge.traces import export
    from openforge.traces.selection import held_out_message, split_counts
    from openforge.traces.source import load_blobs, open_store, plan_store

    try:
        store: CallSource = open_store(path)
    except (FileNotFoundError, StoreError) as e:
        raise _fail(str(e)) from None
    try:
        counts = split_counts(await store.rollouts(), await store.rollouts(selection=selection))
        refusal = held_out_message(counts, "training data", "--allow-held-out")
        if refuse_held_out and refusal is not None:
            raise _fail(refusal)
        plan = await plan_store(store, options, selection)
        digests: list[str] = []
        if fmt == "verl":
            digests = export.image_digests(plan.samples)
        elif fmt == "sft":
            digests = export.sft_image_digests(plan.plans)
        try:
            return plan, await load_blobs(store, digests), counts
        except LookupError as e:
            raise _fail(f"{path}: {e}") from None
    finally:
        await store.close()


def _flag_options(flagged: str, severity: str) -> dict[str, Any]:
    """``TraceOptions``' flag fields from the CLI's words (refused clearly when wrong)."""
    from openforge.store.schemas import FlagSeverity
    from openforge.traces.samples import FlagPolicy

    if flagged not in tuple(FlagPolicy):
        raise _fail(f"--flagged must be drop, zero or keep, not {flagged!r}")
    if severity not in tuple(FlagSeverity):
        raise _fail(f"--flag-severity must be low, medium or high, not {severity!r}")
    return {"flagged": FlagPolicy(flagged), "flag_severity": FlagSeverity(severity)}


def _export(
    store: str,
    fmt: str,
    mode: str,
    out: Path,
    include_running: bool,
    mask_forks: bool,
    min_group_size: int,
    flags: dict[str, Any],
    selection: RolloutSelection,
    allow_held_out: bool,
) -> None:
    from openforge.traces import export
    from openforge.traces.samples import Mode, TraceOptions

    if fmt not in ("verl", "sft", "jsonl"):
        raise _fail(f"--format must be verl, sft or jsonl, not {fmt!r}")
    if mode not in ("auto", "per_call", "merged"):
        raise _fail(f"--mode must be auto, per_call or merged, not {mode!r}")
    options = TraceOptions(
        mode=Mode(mode),
        include_running=include_running,
        mask_forks=mask_forks,
        require_reward=fmt == "verl",
        min_group_size=min_group_size,
        **flags,
    )
    plan, blobs, counts = asyncio.run(
        _with_images(store, options, fmt, selection, refuse_held_out=not allow_held_out)
    )
    typer.echo(counts.line())
    if counts.held_out_taken:
        typer.echo("warning: exporting held-out rollouts as training data (--allow-held-out)")
    masked = ", ".join(f"{k}: {v}" for k, v in sorted(plan.counts.masked_rollouts.items()))
    why = f" (rollouts left out: {masked})" if masked else ""
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "verl":
        samples = plan.samples
        if not samples:
            raise _fail(f"nothing to export from {store}: no trainable samples{why}")
        try:
            kind = export.write_verl(samples, out, blobs=blobs)
        except ImportError as e:
            raise _fail(
                f"{out} asks for a pickled DataProto but veRL is not importable: {e}"
            ) from None
        typer.echo(f"wrote {len(samples)} {mode} samples to {out} ({kind}){why}")
    elif fmt == "sft":
        n = export.write_sft(plan.plans, out, blobs=blobs)
        if not n:
            raise _fail(f"nothing to export from {store}: no teacher calls or successful rollouts")
        typer.echo(f"wrote {n} chat examples to {out} (+ tokenized form){why}")
    else:
        if not plan.plans:
            raise _fail(f"nothing to export from {store}: it holds no rollouts selected")
        n = export.write_jsonl(plan.plans, out)
        typer.echo(f"wrote {n} rollouts to {out}{why}")


def _stats_rows(
    store: str,
    include_running: bool,
    mask_forks: bool,
    flags: dict[str, Any],
    selection: RolloutSelection,
) -> tuple[dict[str, Any], SplitCounts]:
    from openforge.traces.samples import Mode, TraceOptions

    per_call = asyncio.run(
        _with_store(
            store, TraceOptions(Mode.PER_CALL, include_running, mask_forks, **flags), selection
        )
    )[0].counts
    merged_plan, splits = asyncio.run(
        _with_store(
            store, TraceOptions(Mode.MERGED, include_running, mask_forks, **flags), selection
        )
    )
    merged = merged_plan.counts
    ratio = per_call.tokens / merged.tokens if merged.tokens else 0.0
    return {
        "rollouts": merged.rollouts,
        "rollouts used": merged.rollouts_used,
        "calls": merged.calls,
        "teacher calls": merged.teacher_calls,
        **{f"{role} calls (never samples)": n for role, n in sorted(merged.serving_calls.items())},
        "samples (per_call)": per_call.samples,
        "samples (merged)": merged.samples,
        "tokens trained": merged.tokens_trained,
        "tokens (per_call)": per_call.tokens,
        "tokens (merged)": merged.tokens,
        "merge compression": f"{ratio:.2f}x",
        "forks": merged.forks,
        "retries": merged.retries,
        "retry headers": merged.retry_headers,
        "ambiguous parents": merged.ambiguous,
        "drifted turns": merged.drift,
        "groups dropped": merged.groups_dropped,
        f"flagged rollouts ({flags['flag_severity']} and up: {flags['flagged']})": merged.flagged,
        **{f"flags: {rule}": n for rule, n in sorted(merged.flags.items())},
        **{f"masked rollouts: {k}": v for k, v in sorted(merged.masked_rollouts.items())},
        **{f"masked calls: {k}": v for k, v in sorted(merged.masked_calls.items())},
    }, splits


def register(app: typer.Typer) -> None:
    """Add ``openforge traces …`` to the ``openforge`` app."""
    traces = typer.Typer(help="Turn recorded calls into training samples; export, view, count.")
    app.add_typer(traces, name="traces")
    _add_export(traces)
    _add_stats(traces)
    _add_show(traces)
    _add_flag(traces)


def _add_export(traces: typer.Typer) -> None:
    @traces.command("export")
    def export_cmd(
        store: str = _STORE,
        fmt: str = typer.Option("verl", "--format", help="verl | sft | jsonl"),
        mode: str = typer.Option(
            "auto", "--mode", help="auto (per_call for rollouts with images) | per_call | merged"
        ),
        out: Path = _OUT,
        include_running: bool = _INCLUDE_RUNNING,
        mask_forks: bool = _MASK_FORKS,
        min_group_size: int = typer.Option(
            1,
            "--min-group-size",
            min=1,
            help="Drop a GRPO group (a task's rollouts) with fewer usable rollouts than this.",
        ),
        flagged: str = _FLAGGED,
        flag_severity: str = _FLAG_SEVERITY,
        run: list[str] | None = _RUN,
        split: list[str] | None = _SPLIT,
        task: list[str] | None = _TASK,
        allow_held_out: bool = _ALLOW_HELD_OUT,
    ) -> None:
        """Export samples for veRL (parquet or DataProto), SFT (chat JSONL) or analysis:
        training rollouts only unless --split and --allow-held-out say otherwise."""
        from openforge.traces.selection import parse_selection

        flags = _flag_options(flagged, flag_severity)
        selection = parse_selection(run, split, task)
        with _gc_paused():
            _export(
                store, fmt, mode, out, include_running, mask_forks, min_group_size, flags,
                selection, allow_held_out,
            )  # fmt: skip


def _add_stats(traces: typer.Typer) -> None:
    @traces.command("stats")
    def stats_cmd(
        store: str = _STORE,
        include_running: bool = _INCLUDE_RUNNING,
        mask_forks: bool = _MASK_FORKS,
        flagged: str = _FLAGGED,
        flag_severity: str = _FLAG_SEVERITY,
        run: list[str] | None = _RUN,
        split: list[str] | None = _SPLIT,
        task: list[str] | None = _TASK,
    ) -> None:
        """Calls, samples, tokens trained, merge compression, forks, retries, drift, masking,
        the reward-hack monitor's flags (of the training rollouts unless --split says)."""
        from rich.console import Console
        from rich.table import Table

        from openforge.traces.selection import parse_selection

        flags = _flag_options(flagged, flag_severity)
        table = Table("", "value", title=f"traces in {store}")
        with _gc_paused():
            rows, splits = _stats_rows(
                store, include_running, mask_forks, flags, parse_selection(run, split, task)
            )
        for k, v in rows.items():
            table.add_row(k, str(v))
        Console().print(table)
        typer.echo(splits.line())


def _add_show(traces: typer.Typer) -> None:
    @traces.command("show")
    def show_cmd(
        rollout_id: str | None = typer.Argument(
            None, help="The rollout to show; without it, list the selected rollouts' ids."
        ),
        store: str = _STORE,
        html: Path | None = _HTML,
        tokenizer: Path | None = _TOKENIZER,
        run: list[str] | None = _RUN,
        split: list[str] | None = _SPLIT,
        task: list[str] | None = _TASK,
    ) -> None:
        """Print a rollout's paths (trained tokens, observations and forks told apart), or
        list the rollouts --run, --split and --task select (training rollouts by default)."""
        from openforge.traces.selection import parse_selection
        from openforge.traces.view import list_rollouts, show

        if rollout_id is None:
            asyncio.run(list_rollouts(store, parse_selection(run, split, task)))
        else:
            asyncio.run(show(store, rollout_id, html, tokenizer))


def _add_flag(traces: typer.Typer) -> None:
    @traces.command("flag")
    def flag_cmd(
        store: str = _STORE,
        rules: Path | None = _RULES,
        run_dir: list[Path] | None = _RUN_DIR,
        dry_run: bool = typer.Option(False, "--dry-run", help="Report; change no flag."),
    ) -> None:
        """Run the reward-hack monitor's rules again over every finished rollout of a store
        and replace each rollout's flags with what they find."""
        _flag(store, rules, run_dir or [], dry_run)


def _flag(location: str, rules_file: Path | None, run_dirs: list[Path], dry_run: bool) -> None:
    from openforge.store.base import StoreError
    from openforge.store.location import open_store
    from openforge.traces.flagging import FlagReport, flag_store, run_transcripts
    from openforge.traces.monitor import RuleError, load_rules

    try:
        rules = load_rules(rules_file)
    except RuleError as e:
        raise _fail(str(e)) from None
    for d in run_dirs:
        if not d.is_dir():
            raise _fail(f"--run-dir {d}: no such directory")
    transcripts = run_transcripts(run_dirs)

    async def run() -> FlagReport:
        try:
            store = open_store(location, create=False)
        except (FileNotFoundError, StoreError) as e:
            raise _fail(str(e)) from None
        try:
            return await flag_store(store, rules, transcripts, write=not dry_run)
        finally:
            await store.close()

    report = asyncio.run(run())
    for rollout_id, task_id, found in report.flagged:
        typer.echo(f"{rollout_id} ({task_id}): {', '.join(found)}")
    rules_seen = ", ".join(f"{rule} {n}" for rule, n in sorted(report.by_rule.items()))
    verb = "would change" if dry_run else "changed"
    typer.echo(
        f"checked {report.checked} finished rollouts ({report.with_transcript} with their "
        f"transcript) against {len(rules.rules)} rules: {len(report.flagged)} flagged"
        + (f" ({rules_seen})" if rules_seen else "")
        + f"; {verb} the flags of {report.changed}"
    )
