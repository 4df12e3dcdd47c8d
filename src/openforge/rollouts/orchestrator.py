"""``run_rollouts(config)``: every task × n samples, bounded concurrency, a resumable run dir.

Run directory layout::

    RUN_DIR/run.json                     run id, start time, the config (JSON-able parts)
    RUN_DIR/results.jsonl                one RolloutResult per line, appended as each finishes
    RUN_DIR/summary.json                 counts per status, mean reward, per-task pass@k
    RUN_DIR/rollouts/<task_id>/<sample>/agent.log        harness stdout + stderr (tails)
    RUN_DIR/rollouts/<task_id>/<sample>/verifier.log     the verifier's output
    RUN_DIR/rollouts/<task_id>/<sample>/transcript.json  the harness's own transcript, if any

A rerun with the same RUN_DIR skips ``(task_id, sample)`` pairs already in results.jsonl
(the last line for a pair wins). SIGINT/SIGTERM (with ``handle_signals``) cancel the run:
every in-flight rollout is finished on the gateway as ``infra_error`` ("interrupted"), every
sandbox is closed, and nothing is written for them, so a rerun does them again.

With ``retry_infra``, the rerun first finishes as ``infra_error`` the gateway rollouts that
an earlier run could not finish (``RolloutResult.unfinished``: its gateway was lost), so the
store never keeps them open; those it still cannot reach are carried into the new result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from openforge.harnesses.base import Harness
from openforge.harnesses.fingerprint import harness_metadata
from openforge.harnesses.registry import get_harness
from openforge.rollouts.config import RolloutConfig, RolloutResult
from openforge.rollouts.gateway_client import GatewayClient, GatewayConflict, GatewayError
from openforge.rollouts.gateway_watch import GatewayWatch
from openforge.rollouts.reach import refuse_reachable_evidence
from openforge.rollouts.runner import Attempt, RolloutJob, run_job, wanted_roles
from openforge.sandboxes import create_backend
from openforge.sandboxes.base import SandboxBackend
from openforge.suites import load_tasks
from openforge.tasks.judge import judge_from_env
from openforge.tasks.model import Task, TaskError
from openforge.traces.monitor import RuleSet, load_rules

__all__ = ["Interrupted", "load_results", "resolve_tasks", "run_rollouts"]


class Interrupted(Exception):
    """The run was stopped by SIGINT/SIGTERM; finished rollouts are in the run dir."""


def resolve_tasks(config: RolloutConfig) -> tuple[list[Task], list[TaskError]]:
    """The config's tasks (loading them if given as a path), filtered by split."""
    if isinstance(config.tasks, str | Path):
        loaded = load_tasks(config.tasks, config.split)
        return loaded.tasks, loaded.errors
    return [t for t in config.tasks if config.split in (None, t.split)], []


def load_results(out_dir: Path) -> dict[tuple[str, int], RolloutResult]:
    """The results already in ``out_dir/results.jsonl``; a torn last line is ignored."""
    path = out_dir / "results.jsonl"
    out: dict[tuple[str, int], RolloutResult] = {}
    if not path.is_file():
        return out
    names = {f.name for f in dataclasses.fields(RolloutResult)}
    for line in path.read_bytes().splitlines():
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by a crash mid-write
        res = RolloutResult(**{k: v for k, v in data.items() if k in names})
        out[(res.task_id, res.sample)] = res
    return out


def _run_meta(out_dir: Path, config: RolloutConfig, tasks: Sequence[Task]) -> str:
    meta_path = out_dir / "run.json"
    if meta_path.is_file():
        run_id = str(orjson.loads(meta_path.read_bytes())["run_id"])
        return config.run_id or run_id
    run_id = config.run_id or "run-" + secrets.token_hex(4)
    harness = config.harness if isinstance(config.harness, str) else config.harness.name
    meta = {
        "run_id": run_id,
        "created_at": time.time(),
        "harness": harness,
        "harness_options": config.harness_options,
        "n": config.n,
        "model": config.model,
        "gateway_url": config.gateway_url,
        "split": config.split,
        "backend": config.backend if isinstance(config.backend, str) else config.backend.name,
        "tasks": [t.id for t in tasks],
    }
    meta_path.write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    return run_id


def _write(out_dir: Path, res: RolloutResult, att: Attempt) -> None:
    d = out_dir / "rollouts" / res.task_id / str(res.sample)
    if att.agent_log or res.verifier_output or att.transcript is not None:
        d.mkdir(parents=True, exist_ok=True)
    if att.agent_log:
        (d / "agent.log").write_bytes(att.agent_log)
    if res.verifier_output:
        (d / "verifier.log").write_text(res.verifier_output)
    if att.transcript is not None:
        (d / "transcript.json").write_bytes(orjson.dumps(att.transcript.raw, default=str))
    with (out_dir / "results.jsonl").open("ab") as f:
        f.write(orjson.dumps(dataclasses.asdict(res), default=str) + b"\n")


async def _close_unfinished(
    gateway: GatewayClient, done: dict[tuple[str, int], RolloutResult]
) -> dict[tuple[str, int], list[str]]:
    """Finish as ``infra_error`` the earlier infra errors' unrecorded rollouts; the rest."""
    left: dict[tuple[str, int], list[str]] = {}
    for pair, res in done.items():
        if res.status != "infra_error":
            continue
        for rid in res.unfinished:
            details = {"error": f"gateway lost; closed by a later run ({res.error})"}
            try:
                await gateway.finish(rid, "infra_error", None, details)
            except GatewayConflict:
                pass  # its finish did land after all: the store holds a verified outcome
            except GatewayError:
                left.setdefault(pair, []).append(rid)
    return left


async def _run_all(
    config: RolloutConfig,
    pending: list[tuple[Task, int]],
    job_of: _Jobs,
    out_dir: Path | None,
    unfinished: dict[tuple[str, int], list[str]],
) -> list[RolloutResult]:
    sem = asyncio.Semaphore(config.concurrency)
    results: list[RolloutResult] = []

    async def one(task: Task, sample: int) -> None:
        queued = time.perf_counter()
        async with sem:
            if config.on_start is not None:
                config.on_start(task.id, sample)
            waited = time.perf_counter() - queued
            res, att = await run_job(task, sample, job_of(task))
            res.host["slot_wait_s"] = round(waited, 3)
            res.unfinished[:0] = unfinished.get((task.id, sample), [])
            if out_dir is not None:
                await asyncio.to_thread(_write, out_dir, res, att)
            results.append(res)
            if config.on_result is not None:
                config.on_result(res)

    async with asyncio.TaskGroup() as tg:
        for task, sample in pending:
            tg.create_task(one(task, sample))
    return results


log = logging.getLogger("openforge.rollouts")


def _warn_missing_roles(tasks: Sequence[Task], serving: frozenset[str]) -> None:
    """Say before the first rollout that a suite's judge or simulated user has no engine:
    every rollout that needs one would otherwise end as ``infra_error``, one by one."""
    graded = sum(1 for t in tasks if t.grader is not None)
    if graded and "judge" not in serving and judge_from_env() is None:
        log.warning(
            "%d task(s) are graded by their suite's grader, and the gateway has no judge engine "
            "(openforge gateway --judge-engine SPEC) nor is OPENFORGE_JUDGE_BASE_URL set: a "
            "grader that asks a judge ends its rollout as infra_error",
            graded,
        )
    talking = sum(1 for t in tasks if "user" in wanted_roles(t))
    if talking and "user" not in serving:
        log.warning(
            "%d task(s) need a simulated user (multi-turn, or a sidecar that calls a model), "
            "and the gateway serves none (openforge gateway --judge-engine or --user-engine "
            "SPEC): they end as infra_error",
            talking,
        )


@dataclasses.dataclass(slots=True)
class _Jobs:
    """Each task's :class:`RolloutJob`, from the parts every rollout of a run shares."""

    config: RolloutConfig
    harness: Harness
    backend: SandboxBackend
    gateway: GatewayClient
    watch: GatewayWatch
    run_id: str
    monitor: RuleSet | None
    # Every rollout records which harness, at which version and call pattern, made it.
    metadata: dict[str, Any]
    serving_roles: frozenset[str] = frozenset()

    def __call__(self, task: Task) -> RolloutJob:
        return RolloutJob(
            harness=self.harness,
            backend=self.backend,
            gateway=self.gateway,
            watch=self.watch,
            group_id=f"{self.run_id}/{task.id}",
            model=self.config.model,
            workdir=self.config.workdir,
            retries=self.config.retries,
            retry_backoff_s=self.config.retry_backoff_s,
            metadata=dict(self.metadata),
            allow_internet=self.config.allow_task_internet,
            serving_roles=self.serving_roles,
            monitor=self.monitor,
            run_id=self.run_id,
        )


@contextlib.contextmanager
def _signals(enabled: bool) -> Iterator[list[int]]:
    """While inside, SIGINT/SIGTERM cancel the running task; yields the signals received."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    stopped: list[int] = []

    def stop(signum: int) -> None:
        stopped.append(signum)
        if main is not None:
            main.cancel()

    installed: list[signal.Signals] = []
    if enabled:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop, sig)
            installed.append(sig)
    try:
        yield stopped
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _serving_roles(gateway: GatewayClient, tasks: list[Task]) -> frozenset[str]:
    """The judge / user engines the gateway has, when some task needs one (their keys are
    minted per rollout); a gateway that cannot say is met by each rollout's own mint."""
    if not any(wanted_roles(t) for t in tasks):
        return frozenset()
    roles: frozenset[str] = frozenset()
    with contextlib.suppress(GatewayError):
        roles = await gateway.serving_roles()
    _warn_missing_roles(tasks, roles)
    return roles


async def run_rollouts(config: RolloutConfig) -> list[RolloutResult]:
    """Run every (task, sample) of ``config`` not already in its run dir; return all results.

    The returned list holds the earlier results of a resumed run too, ordered by task then
    sample. Raises :class:`Interrupted` when stopped by a signal (``handle_signals``), and
    :class:`~openforge.traces.monitor.RuleError` for a monitor rule file that cannot be used.
    """
    tasks, _errors = resolve_tasks(config)
    harness: Harness = (
        get_harness(config.harness, **config.harness_options)
        if isinstance(config.harness, str)
        else config.harness
    )
    if not config.allow_reachable_evidence:
        refuse_reachable_evidence(tasks, harness)  # before anything is made or written
    # A bad rule file stops the run before anything starts (RuleError names the field).
    monitor = load_rules(config.monitor_rules) if config.monitor else None
    out_dir = Path(config.out_dir) if config.out_dir is not None else None
    done: dict[tuple[str, int], RolloutResult] = {}
    run_id = config.run_id or "run-" + secrets.token_hex(4)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        run_id = _run_meta(out_dir, config, tasks)
        done = load_results(out_dir)
    redo = {k for k, v in done.items() if config.retry_infra and v.status == "infra_error"}
    pending = [
        (t, i) for t in tasks for i in range(config.n) if (t.id, i) not in done.keys() - redo
    ]

    owns_backend = isinstance(config.backend, str)
    backend: SandboxBackend = (
        create_backend(config.backend, **config.backend_options)
        if isinstance(config.backend, str)
        else config.backend
    )
    gateway = GatewayClient(config.gateway_url, config.admin_token)
    watch = GatewayWatch(gateway, config.health_interval_s, config.health_timeout_s)
    metadata = {**harness_metadata(harness.name, harness.version), **config.metadata}
    metadata["run_id"] = run_id
    jobs = _Jobs(config, harness, backend, gateway, watch, run_id, monitor, metadata)
    try:
        with _signals(config.handle_signals) as stopped:
            try:
                unfinished: dict[tuple[str, int], list[str]] = {}
                if config.retry_infra:
                    unfinished = await _close_unfinished(gateway, done)
                jobs.serving_roles = await _serving_roles(gateway, tasks)
                watch.start()
                new = await _run_all(config, pending, jobs, out_dir, unfinished)
            except asyncio.CancelledError:
                if not stopped:
                    raise
                raise Interrupted(f"stopped by signal {stopped[0]}") from None
    finally:
        await asyncio.shield(watch.stop())
        with contextlib.suppress(Exception):
            await asyncio.shield(gateway.close())
        if owns_backend:
            await asyncio.shield(backend.close())
    merged = {**done, **{(r.task_id, r.sample): r for r in new}}
    order = {t.id: i for i, t in enumerate(tasks)}
    return sorted(merged.values(), key=lambda r: (order.get(r.task_id, len(order)), r.sample))
