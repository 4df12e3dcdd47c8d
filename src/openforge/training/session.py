"""Setting up a training run: model, gateway (a child process with the local engine, or one
given by URL), store, trainer, weight sync, metrics and tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from openforge.training.config import ConfigError, TrainConfig
from openforge.training.loop import LoopEnv
from openforge.training.metrics import MetricsWriter

__all__ = ["gateway_process", "open_session", "save_config"]

log = logging.getLogger("openforge.training")


def save_config(cfg: TrainConfig, run_dir: Path) -> None:
    """Write the effective config beside the run's metrics, for the record and for resume."""
    data = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "source"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@contextlib.asynccontextmanager
async def gateway_process(
    model_dir: Path,
    store: Path,
    admin_token: str | None = None,
    threads: int = 0,
    judge_engine: str | None = None,
    user_engine: str | None = None,
    engine: str = "local",
    urls: Sequence[str] = (),
    served_model: str = "",
) -> AsyncIterator[tuple[str, str]]:
    """``openforge gateway --engine local`` in a child process; yields its admin listener's
    URL and admin token (a fresh one unless ``admin_token`` is given).

    A child process keeps the engine's forward passes off the trainer's interpreter.
    ``threads`` > 0 caps its torch threads (``OMP_NUM_THREADS``). ``judge_engine`` /
    ``user_engine``: the engine SPECs for judge-role and user-role keys. ``engine``
    vllm or sglang: the gateway in front of the servers at ``urls`` serving
    ``served_model``.
    """
    from openforge.gateway.server import GatewayProcess

    env = {"OPENFORGE_ADMIN_TOKEN": admin_token} if admin_token else {}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    args = ["--engine", engine, "--model", str(model_dir), "--store", str(store)]
    for url in urls:
        args += ["--url", url]
    if served_model:
        args += ["--served-model", served_model]
    if judge_engine:
        args += ["--judge-engine", judge_engine]
    if user_engine:
        args += ["--user-engine", user_engine]
    proc = await GatewayProcess.start(args, env=env, timeout_s=300.0)
    try:
        yield proc.control_url, proc.admin_token
    finally:
        await proc.stop()


# The training config's keys for each part of a task selection, for its error messages.
_SELECTION_KEYS = {
    "include": "task_ids",
    "exclude": "exclude_tasks",
    "limit": "task_limit",
    "sample": "task_sample",
}


def _load_split(cfg: TrainConfig, split: str, key: str) -> list[Any]:
    from openforge.suites import load_tasks
    from openforge.suites.selection import SelectionError, TaskSelection, select_tasks

    loaded = load_tasks(cfg.tasks)
    for err in loaded.errors:
        log.warning("task error: %s", err)
    selection = TaskSelection(
        tuple(cfg.task_ids), tuple(cfg.exclude_tasks), cfg.task_limit, cfg.task_sample,
        cfg.task_sample_seed,
    )  # fmt: skip
    try:
        # Selected over the whole suite, then split: the same tasks whichever split asks.
        chosen = select_tasks(loaded.tasks, selection, _SELECTION_KEYS)
    except SelectionError as exc:
        raise ConfigError(exc.option, f"{exc.problem} in {cfg.tasks!r}", cfg.source) from None
    tasks = [t for t in chosen if t.split == split]
    if key == "train_split" and not tasks:
        raise ConfigError(key, f"no {split!r} tasks in {cfg.tasks!r}", cfg.source)
    return tasks


async def _checked(cfg: TrainConfig, tasks: list[Any]) -> list[Any]:
    """``tasks`` without those the oracle check quarantines (tasks with their own image)."""
    from openforge.sandboxes import create_backend
    from openforge.tasks.oracle import check_task

    own = [t for t in tasks if t.environment is not None]
    if not cfg.check_tasks or not own:
        return tasks
    backend = create_backend(cfg.sandbox)
    try:
        bad = set()
        for task in own:
            result = await check_task(backend, task)
            if not result.ok:
                log.warning("task %s quarantined: %s", task.id, result.reason)
                bad.add(task.id)
    finally:
        await backend.close()
    return [t for t in tasks if t.id not in bad]


@contextlib.asynccontextmanager
async def open_session(
    cfg: TrainConfig,
    gateway_url: str | None = None,
    store_path: str | Path | None = None,
) -> AsyncIterator[LoopEnv]:
    """Everything :func:`~openforge.training.loop.run_loop` needs, torn down on exit.

    ``gateway_url``/``store_path`` override the config (a test's in-process gateway: its
    admin listener, with ``cfg.admin_token`` its token). A gateway given by URL is reached
    with ``cfg.admin_token``, else ``$OPENFORGE_ADMIN_TOKEN``, else the stored token.
    """
    from openforge.home import read_admin_token
    from openforge.models.registry import resolve_model
    from openforge.rollouts import run_rollouts
    from openforge.traces.source import open_store
    from openforge.training.trainer import Trainer
    from openforge.training.weight_sync import WeightSync

    given = gateway_url or cfg.gateway_url
    if given is not None:  # a wrong URL stops the run now, not after the model loads
        from openforge.rollouts.preflight import GatewayUnusable, check_gateway

        try:
            await check_gateway(given, cfg.admin_token or read_admin_token(), "gateway_url")
        except GatewayUnusable as exc:
            raise ConfigError("gateway_url", str(exc), cfg.source) from None
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir)
    try:
        model_dir = await asyncio.to_thread(resolve_model, cfg.model)
    except Exception as exc:
        raise ConfigError("model", str(exc), cfg.source) from None
    train_tasks = await _checked(cfg, _load_split(cfg, cfg.train_split, "train_split"))
    eval_tasks = await _checked(cfg, _load_split(cfg, cfg.eval_split, "eval_split"))
    if not train_tasks:
        raise ConfigError(
            "tasks", "every train task is quarantined by the oracle check", cfg.source
        )
    async with contextlib.AsyncExitStack() as stack:
        url = gateway_url or cfg.gateway_url
        token = cfg.admin_token or read_admin_token()
        store_file = Path(store_path or cfg.store or run_dir / "store.db")
        if url is None:
            spawned = gateway_process(
                model_dir,
                store_file,
                cfg.admin_token,
                cfg.threads,
                cfg.judge_engine,
                cfg.user_engine,
                cfg.engine,
                cfg.engine_urls,
                cfg.served_model,
            )
            started_url, token = await stack.enter_async_context(spawned)
            url = started_url
        store = open_store(store_file)
        stack.push_async_callback(store.close)
        trainer = await asyncio.to_thread(Trainer, cfg, model_dir)
        sync = WeightSync(url, run_dir / "weights", token, keep=2)
        stack.push_async_callback(sync.close)
        metrics = MetricsWriter(run_dir)
        stack.callback(metrics.close)
        yield LoopEnv(
            gateway_url=url,
            admin_token=token,
            store=store,
            run_rollouts=run_rollouts,
            trainer=trainer,
            sync=sync,
            metrics=metrics,
            train_tasks=train_tasks,
            eval_tasks=eval_tasks,
        )
