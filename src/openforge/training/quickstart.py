"""``openforge quickstart``: SmolLM2-135M learns claw-drill skills with the built-in claw agent.

Pull the model, start the gateway with the local engine (a child process), record teacher
trajectories (reference solutions of 2 train instances per skill as claw tool calls,
scripted engine), evaluate the claw agent on the held-out instances, SFT warm-up, a few
async GRPO steps on all train instances in local sandboxes, evaluate again, and write
``metrics.jsonl``, TensorBoard logs and ``report.html`` into the run directory. Sized for
2 cores: 8.6 min measured at load ~1 (docs/training.md has the figures and what it does
and does not show).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from openforge.rollouts.cost import Prices
from openforge.tasks.model import Task
from openforge.training.config import ConfigError, TrainConfig

__all__ = [
    "QUICKSTART_SUITE", "quickstart_config", "run_quickstart", "teacher_tasks",
]  # fmt: skip

log = logging.getLogger("openforge.training")


# The quickstart trains on claw-drill: one-command file skills (write, copy, rename, count,
# sort, replace, ...) in generated instances. It is evaluated on the suite's test
# instances: the same skills with file names, words and numbers drawn from a word pool
# no train instance uses. (On claw-mini's held-out tasks, which need commands no train
# task uses, SmolLM2-135M stays at 0 after training: docs/training.md.)
QUICKSTART_SUITE = "claw-drill"


def teacher_tasks(train_tasks: list[Task], per_family: int = 2) -> list[Task]:
    """The train instances whose reference solutions the SFT warm-up learns from: the
    first ``per_family`` of each skill family. GRPO then trains on every train instance,
    most of which the warm-up never showed."""
    return [t for t in train_tasks if int(t.id.rsplit("-", 1)[-1]) < per_family]


def quickstart_config(run_dir: str, steps: int) -> TrainConfig:
    """The quickstart's settings (also a starting point for ``openforge train``)."""
    # Sized for 2 CPU cores (measured, docs/training.md): short replies and at most 3
    # turns (one bash call, submit, one spare), merged samples (the ~480-token system
    # prompt is trained once per rollout), only the top 10 of 30 layers trained (the rest
    # runs forward without autograd), an SFT warm-up on the reference solutions.
    return TrainConfig(
        model="smollm2-135m",
        harness="claw",
        tasks=QUICKSTART_SUITE,
        steps=steps,
        tasks_per_step=3,
        group_size=4,
        sample_mode="merged",
        async_rollouts=True,
        max_staleness=1,
        learning_rate=2e-5,
        train_layers=10,
        sft_epochs=3,
        sft_learning_rate=2e-4,
        eval_samples=1,
        eval_temperature=0.6,
        concurrency=8,
        threads=1,
        max_tokens=64,
        rollout_options={"harness_options": {"max_turns": 3}},
        run_dir=run_dir,
    )


async def _heartbeat(run_dir: Path, every_s: float = 30.0) -> None:
    """A line every ``every_s`` seconds, so a user sees the run is alive between phases."""
    started = time.perf_counter()
    while True:
        await asyncio.sleep(every_s)
        done = sum(len(p.read_bytes().splitlines()) for p in run_dir.glob("**/results.jsonl"))
        log.info("... %.0f s in, %d rollouts finished so far", time.perf_counter() - started, done)


@contextlib.contextmanager
def engine_servers(
    engine: str, urls: Sequence[str], served_model: str, vllm_python: str, run_dir: Path
) -> Iterator[tuple[list[str], str]]:
    """The engine servers' URLs and served model name: those given, or (``engine`` vllm,
    no URL, ``vllm_python`` set) a vLLM server started from that interpreter on
    SmolLM2-135M's directory, logging to ``run_dir/vllm/vllm.log``, stopped on exit."""
    if engine != "vllm" or urls:
        if vllm_python and engine == "vllm":
            raise RuntimeError("give --engine-url (a running server) or --vllm-python, not both")
        yield list(urls), served_model
        return
    if not vllm_python:
        raise RuntimeError(
            "--engine vllm needs --engine-url URL (a vLLM server you started, "
            "docs/training.md) or --vllm-python PY (or $OPENFORGE_VLLM_PYTHON): a Python "
            "with vLLM installed, from which the quickstart starts one"
        )
    from openforge.engines.vllm_launch import VLLMProcess
    from openforge.models.registry import resolve_model

    log.info("starting vLLM (%s) on %s; /health takes ~1-2 min on a CPU", vllm_python, run_dir)
    server = VLLMProcess.start(
        vllm_python, resolve_model("smollm2-135m"), run_dir / "vllm", served_model or "smollm2"
    )
    log.info("vLLM healthy after %.0f s at %s", server.startup_s, server.url)
    try:
        yield [server.url], server.served_model
    finally:
        server.stop()


def run_quickstart(
    run_dir: str = "runs/quickstart",
    steps: int = 3,
    prices: Prices | None = None,
    engine: Literal["local", "vllm", "sglang"] = "local",
    engine_urls: Sequence[str] = (),
    served_model: str = "",
    vllm_python: str = "",
) -> Path:
    """Run the whole quickstart; returns the report's path (``summary.json`` beside it holds
    the cost, priced with ``prices``). Raises RuntimeError with a message saying what is
    missing (model download, claw harness, vLLM). ``engine`` vllm or sglang: the gateway
    is started in front of the server(s) at ``engine_urls`` serving SmolLM2-135M's weights
    as ``served_model``, on this machine (it reloads the run's weights from disk); with
    ``vllm_python`` instead of URLs, a vLLM server is started from that interpreter for
    the run (:func:`engine_servers`)."""
    from openforge.harnesses.base import HarnessError
    from openforge.harnesses.registry import get_harness
    from openforge.models.registry import pull

    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per admin call
    try:
        get_harness("claw")
    except HarnessError as exc:
        raise RuntimeError(f"the built-in claw harness is not available: {exc}") from None
    try:
        pull("smollm2-135m")
    except Exception as exc:
        raise RuntimeError(f"could not pull smollm2-135m: {exc}") from None
    with engine_servers(engine, engine_urls, served_model, vllm_python, Path(run_dir)) as (
        urls,
        served,
    ):
        try:
            cfg = dataclasses.replace(
                quickstart_config(run_dir, steps),
                engine=engine,
                engine_urls=urls,
                served_model=served,
            )
        except ConfigError as exc:
            raise RuntimeError(str(exc)) from None
        report = asyncio.run(_run(cfg, prices, started))
    print(
        f"quickstart finished in {(time.perf_counter() - started) / 60:.1f} min\n"
        f"run directory: {Path(run_dir).resolve()}\nreport: {report.resolve()}"
    )
    return report


async def _run(cfg: TrainConfig, prices: Prices | None, started: float) -> Path:
    """Teacher, evaluations, SFT warm-up and GRPO steps; the report's path."""
    from openforge.models.registry import resolve_model
    from openforge.training.loop import run_loop
    from openforge.training.report import write_run_report
    from openforge.training.session import open_session
    from openforge.training.teacher import sft_warmup, teacher_samples

    beat = asyncio.create_task(_heartbeat(Path(cfg.run_dir)))
    try:
        log.info("starting the gateway (%s engine, %s) and the trainer...", cfg.engine, cfg.model)
        async with open_session(cfg) as env:
            samples = await teacher_samples(
                cfg, teacher_tasks(env.train_tasks), resolve_model(cfg.model)
            )
            warmup = sft_warmup(samples) if samples and cfg.sft_epochs else None
            summary = await run_loop(cfg, env, warmup=warmup)
    finally:
        beat.cancel()
    log.info("trained %d steps, weight version %d", summary.steps_done, summary.version)
    return await write_run_report(
        cfg, Path(cfg.run_dir) / "store.db", time.perf_counter() - started, prices,
        title=f"OpenForge quickstart: {cfg.model} + {cfg.harness} on {cfg.tasks}",
    )  # fmt: skip
