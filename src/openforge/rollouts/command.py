"""``openforge rollout`` and ``openforge eval``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from openforge.cli_options import (
    DEFAULT_BACKEND,
    BackendOpt,
    ClawEvalFixturesOpt,
    ExcludeOpt,
    HarnessOptionOpt,
    LimitOpt,
    SampleOpt,
    SeedOpt,
    TaskOpt,
    harness_options,
)
from openforge.rollouts.cost import Prices

if TYPE_CHECKING:
    from rich.console import Console

    from openforge.rollouts.config import RolloutResult
    from openforge.suites.loading import TaskSet
    from openforge.suites.selection import TaskSelection
    from openforge.tasks.model import Task

__all__ = [
    "PriceInputOpt", "PriceOutputOpt", "PriceSandboxOpt", "PriceTrainOpt", "RunArgs", "eval_",
    "prices", "register", "rollout",
]  # fmt: skip

TasksOpt = Annotated[
    str,
    typer.Option(
        "--tasks", help="Task dir, suite dir or bundled suite name (claw-mini, claw-drill)."
    ),
]
HarnessOpt = Annotated[str, typer.Option("--harness", help="Harness adapter name (shell, …).")]
NOpt = Annotated[int, typer.Option("--n", min=1, help="Samples per task (the GRPO group).")]
ConcOpt = Annotated[int, typer.Option("--concurrency", min=1, help="Rollouts at once.")]
GatewayOpt = Annotated[
    str,
    typer.Option(
        "--gateway",
        help="The gateway's admin API root, as `openforge gateway` prints it "
        "(http://127.0.0.1:PORT+1); the admin token comes from $OPENFORGE_ADMIN_TOKEN or the "
        "token file the gateway wrote.",
    ),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Run directory (rerun to resume).")]
ModelOpt = Annotated[str, typer.Option("--model", help="Model name the harness asks for.")]
SplitOpt = Annotated[
    str | None,
    typer.Option(
        "--split",
        help="train or test (held out), or a suite's own split "
        "(ClawEval: general, multimodal, multi_turn).",
    ),
]
RetriesOpt = Annotated[
    int, typer.Option("--retries", min=0, help="Extra attempts after an infra error.")
]
InternetOpt = Annotated[
    bool,
    typer.Option(
        "--allow-task-internet",
        help="Give tasks that ask for the internet (allow_internet) an open network.",
    ),
]
ReachOpt = Annotated[
    bool,
    typer.Option(
        "--allow-reachable-evidence",
        help="Run a harness with a shell on tasks whose reward evidence lies in its sandbox "
        "(GUI tasks' result files, the web apps' database); refused by default: it could "
        "write its own reward.",
    ),
]
RewardKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--reward-key", help="Harbor tasks: the reward.json key that is the reward (default: mean)."
    ),
]
MonitorRulesOpt = Annotated[
    Path | None,
    typer.Option(
        "--monitor-rules",
        help="A TOML file of reward-hack monitor rules: adds to, replaces or disables the "
        "defaults (docs/traces.md).",
    ),
]
RetryInfraOpt = Annotated[
    bool, typer.Option("--retry-infra", help="On resume, rerun rollouts that ended in infra_error.")
]


PriceInputOpt = Annotated[
    float | None,
    typer.Option("--price-input", min=0, help="Price per million engine prompt tokens."),
]
PriceOutputOpt = Annotated[
    float | None,
    typer.Option("--price-output", min=0, help="Price per million engine output tokens."),
]
PriceSandboxOpt = Annotated[
    float | None, typer.Option("--price-sandbox-hour", min=0, help="Price per sandbox-hour.")
]
PriceTrainOpt = Annotated[
    float | None,
    typer.Option("--price-train", min=0, help="Price per million tokens through the trainer."),
]


def prices(
    input_mtok: float | None,
    output_mtok: float | None,
    sandbox_hour: float | None,
    train_mtok: float | None = None,
) -> Prices:
    """The run's prices from the ``--price-*`` options (a missing one is not charged)."""
    return Prices(input_mtok, output_mtok, sandbox_hour, train_mtok)


@dataclass(frozen=True, slots=True)
class RunArgs:
    """What ``openforge rollout`` and ``openforge eval`` run, from their options."""

    tasks: str
    harness: str
    harness_option: list[str] | None
    n: int
    concurrency: int
    backend: str
    gateway: str
    out: Path
    model: str
    split: str | None
    retries: int
    retry_infra: bool
    ks: list[int]  # k of pass@k and pass^k
    allow_task_internet: bool = False
    reward_key: str | None = None
    price: Prices | None = None
    allow_reachable_evidence: bool = False
    monitor_rules: Path | None = None
    selection: TaskSelection | None = None  # --task/--exclude/--limit/--sample; None: all
    claweval_fixtures: Path | None = None


def _load_for_run(args: RunArgs, console: Console) -> TaskSet:
    """The tasks to run, each problem with them printed; exit 2 when none is left."""
    from rich.markup import escape

    from openforge.suites.catalog import SUITE_SPLITS
    from openforge.suites.command import load_for_command
    from openforge.suites.harbor.loader import with_reward_key
    from openforge.suites.selection import TaskSelection
    from openforge.traces.monitor import RuleError, load_rules

    try:
        load_rules(args.monitor_rules)  # checked before anything runs
    except RuleError as exc:
        console.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if args.split not in (None, "train", "test", *SUITE_SPLITS):
        allowed = ", ".join(("train", "test", *SUITE_SPLITS))
        raise typer.BadParameter(f"must be one of {allowed}", param_hint="--split")
    selection = args.selection or TaskSelection()

    def say(line: str) -> None:
        console.print(line, markup=False)

    loaded = load_for_command(args.tasks, selection, args.split, say, args.claweval_fixtures)
    if args.reward_key:
        loaded.tasks = [with_reward_key(t, args.reward_key) for t in loaded.tasks]
    asked = [t.id for t in loaded.tasks if t.wants_internet]
    if asked:
        how = "given an open network" if args.allow_task_internet else "kept gateway-only"
        hint = "" if args.allow_task_internet else " (--allow-task-internet to allow)"
        console.print(f"tasks asking for the internet, {how}{hint}: {', '.join(asked)}",
                      markup=False)  # fmt: skip
    if not loaded.tasks:
        where = f"{args.tasks} (split {args.split})" if args.split else args.tasks
        console.print(f"[red]no tasks to run in {escape(where)}[/]")
        raise typer.Exit(2)
    return loaded


def _run(args: RunArgs) -> None:
    import asyncio
    import time

    from rich.console import Console
    from rich.markup import escape

    from openforge.harnesses.base import HarnessError
    from openforge.home import read_admin_token
    from openforge.progress import concurrency_warning, cores
    from openforge.rollouts.config import RolloutConfig
    from openforge.rollouts.orchestrator import Interrupted, run_rollouts
    from openforge.rollouts.preflight import GatewayUnusable, check_gateway_sync
    from openforge.rollouts.progress import RolloutCounts, live_display
    from openforge.sandboxes.base import SandboxError

    console = Console(stderr=True, soft_wrap=True)  # file names in messages must not break
    # The tasks and the selection first: their mistakes are the user's to fix whatever the
    # gateway's state, and need no server to find.
    loaded = _load_for_run(args, console)
    if not args.allow_reachable_evidence:
        # A harness that could write the reward's evidence is the user's choice to fix, and
        # is told whatever the gateway's state (the orchestrator checks again).
        _refuse_reachable_evidence(args, loaded.tasks, console)
    try:
        check_gateway_sync(args.gateway, read_admin_token())
    except GatewayUnusable as exc:
        console.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    out = args.out
    skipped = _already_done(args, loaded.tasks)
    live = RolloutCounts(total=len(loaded.tasks) * args.n, skipped=skipped)
    warning = concurrency_warning(args.concurrency, cores())
    if warning:
        console.print(f"warning: {warning}", markup=False)
    try:
        config = RolloutConfig(
            tasks=loaded.tasks,
            harness=args.harness,
            harness_options=harness_options(args.harness_option),
            n=args.n,
            concurrency=args.concurrency,
            backend=args.backend,
            gateway_url=args.gateway,
            model=args.model,
            split=args.split,
            out_dir=out,
            retries=args.retries,
            retry_infra=args.retry_infra,
            allow_task_internet=args.allow_task_internet,
            allow_reachable_evidence=args.allow_reachable_evidence,
            monitor_rules=args.monitor_rules,
            handle_signals=True,
            on_result=live.finished,
            on_start=live.started,
        )
    except ValueError as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    started = time.perf_counter()
    try:
        with live_display(live, console):
            results = asyncio.run(run_rollouts(config))
    except Interrupted as exc:
        console.print(
            f"[yellow]{exc}[/]: every sandbox was torn down; rerun the same command to resume"
        )
        raise typer.Exit(130) from None
    except (HarnessError, SandboxError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    _report(args, loaded.tasks, results, time.perf_counter() - started, console)


def _refuse_reachable_evidence(args: RunArgs, tasks: list[Task], console: Console) -> None:
    """Exit 2 when the harness could write evidence the tasks' rewards are read from."""
    from rich.markup import escape

    from openforge.harnesses.base import HarnessError
    from openforge.harnesses.registry import get_harness
    from openforge.rollouts.reach import refuse_reachable_evidence

    try:
        harness = get_harness(args.harness, **harness_options(args.harness_option))
        refuse_reachable_evidence(tasks, harness)
    except (HarnessError, ValueError) as exc:
        console.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None


def _already_done(args: RunArgs, tasks: list[Task]) -> int:
    """How many of the asked rollouts ``--out`` already holds (resumed runs skip them)."""
    from openforge.rollouts.orchestrator import load_results

    ids = {t.id for t in tasks}
    previous = load_results(args.out) if args.out.is_dir() else {}
    return sum(
        1
        for (task_id, sample), r in previous.items()
        if task_id in ids
        and sample < args.n
        and not (args.retry_infra and r.status == "infra_error")
    )


def _report(
    args: RunArgs,
    tasks: list[Task],
    results: list[RolloutResult],
    wall_s: float,
    console: Console,
) -> None:
    """Write summary.json (pass@k, the suites' own metrics, cost) and print the tables."""
    import dataclasses

    import orjson
    from rich.console import Console

    from openforge.rollouts.cost import RunCost
    from openforge.rollouts.metrics import summarize
    from openforge.rollouts.progress import print_summary
    from openforge.suites.loading import warning_lines
    from openforge.suites.metrics import suite_metrics

    summary = summarize(results, args.ks)
    suites = suite_metrics(tasks, results, args.n)
    cost = RunCost(wall_s=wall_s)
    cost.add_results(results)
    cost.add_phase("rollouts", cost.wall_s)
    warnings = warning_lines(tasks)
    body = {
        **dataclasses.asdict(summary),
        "suites": [dataclasses.asdict(m) for m in suites],
        "cost": cost.as_dict(args.price),
        "task_warnings": warnings,
    }
    (args.out / "summary.json").write_bytes(
        orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    )
    table_console = Console()
    if not table_console.is_terminal:
        table_console = Console(width=200)  # a pipe or file: don't squeeze the columns
    print_summary(table_console, summary, args.ks)
    for m in suites:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in m.overall.items())
        table_console.print(f"{m.suite} ({m.trials} trials/task): {shown}", markup=False)
        for name, values in m.by_category.items():
            shown = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
            table_console.print(f"  {name}: {shown}", markup=False)
    for line in _rollout_ids(results):
        table_console.print(line, markup=False, highlight=False)
    for line in warnings:
        console.print(f"warning: {line}", markup=False)
    console.print(_cost_line(cost, args.price), markup=False)
    console.print(f"results: {args.out / 'results.jsonl'}", markup=False)
    run_json = args.out / "run.json"
    if run_json.is_file():
        run_id = orjson.loads(run_json.read_bytes()).get("run_id")
        console.print(
            f"run id: {run_id} (openforge traces show --store STORE --run {run_id} lists its "
            "rollouts)",
            markup=False,
        )


def _rollout_ids(results: list[RolloutResult], limit: int = 40) -> list[str]:
    """Lines naming each rollout's gateway id, the one `openforge traces show` takes."""
    rows = sorted(results, key=lambda r: (r.task_id, r.sample))
    if not rows:
        return []
    lines = ["rollout ids (openforge traces show ID --store STORE):"]
    for r in rows[:limit]:
        reward = "-" if r.reward is None else f"{r.reward:g}"
        lines.append(f"  {r.rollout_id or '-'}  {r.task_id} #{r.sample}  {r.status}  {reward}")
    if len(rows) > limit:
        lines.append(f"  … {len(rows) - limit} more: field rollout_id of results.jsonl")
    return lines


def _cost_line(cost: Any, price: Prices | None) -> str:
    tokens = ", ".join(
        f"{role} {c.prompt:,} in / {c.output:,} out" for role, c in sorted(cost.tokens.items())
    )
    line = f"cost: {cost.sandbox_s:.0f} sandbox-s, engine tokens {tokens or 'none'}"
    money = cost.money(price) if price is not None else {}
    return line + (f", price {money['total']:.4f}" if money else "")


def rollout(**options: Any) -> None:
    """Run every task × n through a harness in sandboxes, verify, and report rewards."""
    eval_(k=[1], **options)


def eval_(
    tasks: TasksOpt,
    harness: HarnessOpt,
    gateway: GatewayOpt,
    out: OutOpt,
    harness_option: HarnessOptionOpt = None,
    n: NOpt = 1,
    k: Annotated[
        list[int] | None,
        typer.Option("--k", help="k for pass@k and pass^k (repeatable; default 1 and n)."),
    ] = None,
    concurrency: ConcOpt = 8,
    backend: BackendOpt = DEFAULT_BACKEND,
    model: ModelOpt = "openforge",
    split: SplitOpt = None,
    retries: RetriesOpt = 2,
    retry_infra: RetryInfraOpt = False,
    allow_task_internet: InternetOpt = False,
    reward_key: RewardKeyOpt = None,
    monitor_rules: MonitorRulesOpt = None,
    price_input: PriceInputOpt = None,
    price_output: PriceOutputOpt = None,
    price_sandbox_hour: PriceSandboxOpt = None,
    allow_reachable_evidence: ReachOpt = False,
    task: TaskOpt = None,
    exclude: ExcludeOpt = None,
    limit: LimitOpt = None,
    sample: SampleOpt = None,
    seed: SeedOpt = 0,
    claweval_fixtures: ClawEvalFixturesOpt = None,
) -> None:
    """Run every task × n like `openforge rollout`, then report pass@k and pass^k per task
    and overall."""
    from openforge.suites.command import task_selection

    ks = sorted(set(k or [1, n]))
    bad = [x for x in ks if not 1 <= x <= n]
    if bad:
        raise typer.BadParameter(f"k must lie in 1..n={n}, got {bad}", param_hint="--k")
    _run(
        RunArgs(
            tasks, harness, harness_option, n, concurrency, backend, gateway, out, model, split,
            retries, retry_infra, ks, allow_task_internet, reward_key,
            prices(price_input, price_output, price_sandbox_hour), allow_reachable_evidence,
            monitor_rules, task_selection(task, exclude, limit, sample, seed), claweval_fixtures,
        )
    )  # fmt: skip


def _options_but(command: Callable[..., None], *names: str) -> inspect.Signature:
    """``command``'s options (its signature, annotations evaluated) without ``names``."""
    sig = inspect.signature(command, eval_str=True)
    return sig.replace(parameters=[p for p in sig.parameters.values() if p.name not in names])


# rollout takes eval's options, --k aside (it reports pass@1): declared once, in eval_.
rollout.__signature__ = _options_but(eval_, "k")  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    """Add ``rollout`` and ``eval`` to the ``openforge`` app."""
    app.command("rollout")(rollout)
    app.command("eval")(eval_)
