"""The SFT warm-up: teacher trajectories from the tasks' reference solutions.

A model as small as SmolLM2-135M does not write ``<tool_call>{…}</tool_call>`` on its own,
so GRPO from scratch sees no reward at all. The OpenForgeRL recipe starts with supervised
fine-tuning on teacher trajectories; here the teacher is the task's own
``solution/solve.sh``, played through a real gateway by the scripted engine as the claw
agent's tool calls (one ``bash`` call running the solution's commands, then ``submit``).
The claw agent runs it in a local sandbox and the verifier scores it exactly like a
policy rollout, so only solutions that pass become training data. The recorded calls are
exported by the same code as ``openforge traces export --format sft`` (its tokenized
form: prompt ids + the teacher's output ids with the loss mask on the output), and
:meth:`~openforge.training.trainer.Trainer.sft_step` trains cross-entropy on them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shlex
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from openforge.tasks.model import Task
from openforge.traces.samples import SampleImage

if TYPE_CHECKING:
    from openforge.training.config import TrainConfig
    from openforge.training.loop import LoopEnv, Warmup

__all__ = [
    "TEACHER_HARNESSES",
    "SftSample",
    "TeacherScripts",
    "export_teacher_sft",
    "load_sft_images",
    "load_sft_samples",
    "record_teacher",
    "sft_batches",
    "sft_warmup",
    "solution_command",
    "solution_files",
    "teacher_samples",
    "teacher_script",
    "teacher_scripts",
]

log = logging.getLogger("openforge.training")


@dataclass(slots=True)
class SftSample:
    """One teacher path: ``prompt_ids`` then ``response_ids`` (observations masked out)."""

    rollout_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] = field(default_factory=list)  # unused by SFT; the trainer's shape
    images: list[SampleImage] = field(default_factory=list)  # what the path shows a VLM


def solution_command(task: Task) -> str | None:
    """The shell commands of the task's ``solution/solve.sh`` (shebang and ``set -e``
    dropped, joined with ``&&`` so a failing step stops it), or None without one."""
    path = task.solution.get("solve.sh") or task.path / "solution" / "solve.sh"
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    lines = [
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.startswith("#!") and line.strip() != "set -e"
    ]
    if not lines:
        return None
    # A multi-line command (a python3 -c '…' block) must stay one shell word list.
    joined = "\n".join(lines)
    try:
        shlex.split(joined)
    except ValueError:
        return None
    return joined if len(lines) > 1 and "'" in joined else " && ".join(lines)


# The teacher's last step per harness: how each agent says it is done.
_FINISH: dict[str, dict[str, Any]] = {
    "claw": {"name": "submit", "arguments": {}},
    # mini-swe-agent stops when a command's output starts with this line (its own prompt
    # tells the model to run it, alone, to submit).
    "mini-swe-agent": {
        "name": "bash",
        "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
    },
}
TEACHER_HARNESSES = tuple(_FINISH)


def teacher_script(task: Task, harness: str = "claw") -> list[dict[str, Any]] | None:
    """The scripted engine's replies for ``task`` under ``harness`` (claw or mini-swe-agent,
    both of which offer a ``bash`` tool): ``bash`` with the solution, then the harness's own
    way to finish."""
    command = solution_command(task)
    if command is None:
        return None
    return [
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"tool_calls": [_FINISH[harness]]},
    ]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def solution_files(
    task: Task, max_chars: int = 400, timeout_s: float = 20.0
) -> dict[str, str] | None:
    """The text files ``solution/solve.sh`` creates or changes, found by running it in a
    scratch copy of the workspace; None when it deletes or renames a file, fails, writes
    more than ``max_chars`` characters or non-UTF-8 bytes, or writes a line the
    instruction does not contain."""
    solve = task.solution.get("solve.sh")
    if solve is None:
        return None
    with tempfile.TemporaryDirectory(prefix="openforge-teacher-") as tmp:
        root = Path(tmp)
        for rel, data in task.workspace_bytes().items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        before = _snapshot(root)
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", str(solve), cwd=root,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            code = await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return None
        after = _snapshot(root)
    if code != 0 or set(before) - set(after):
        return None
    try:
        changed = {p: d.decode() for p, d in after.items() if before.get(p) != d}
    except UnicodeDecodeError:
        return None
    if not changed or sum(len(t) for t in changed.values()) > max_chars:
        return None
    # Only content the instruction spells out: writing a computed answer (a count, a sum)
    # would teach the model to guess numbers instead of computing them.
    said = all(
        line.strip() in task.instruction
        for text in changed.values()
        for line in text.splitlines()
        if line.strip()
    )
    return changed if said else None


async def teacher_scripts(task: Task, harness: str = "claw") -> dict[str, list[dict[str, Any]]]:
    """Every teacher variant for ``task``, by name: ``bash`` (the solution's commands) and,
    for claw, where the solution only creates or changes small text files, ``write`` (one
    ``write`` call per file with the content the solution produced). Each ends with the
    harness's way to finish (claw's ``submit``)."""
    variants: dict[str, list[dict[str, Any]]] = {}
    bash = teacher_script(task, harness)
    if bash is not None:
        variants["bash"] = bash
    if harness != "claw":  # only claw has a write tool
        return variants
    files = await solution_files(task)
    if files:
        writes = [
            {"name": "write", "arguments": {"path": p, "content": c}} for p, c in files.items()
        ]
        variants["write"] = [
            {"tool_calls": writes},
            {"tool_calls": [{"name": "submit", "arguments": {}}]},
        ]
    return variants


# A task's teacher variants by name, each the scripted engine's replies in order.
TeacherScripts = Callable[[Task], Awaitable[dict[str, list[dict[str, Any]]]]]


async def record_teacher(
    tasks: Sequence[Task],
    model_dir: Path,
    out_dir: Path,
    harness_options: dict[str, Any],
    harness: str = "claw",
    scripts_for: TeacherScripts | None = None,
) -> list[Any]:
    """Play each task's teacher variants (``scripts_for``, by default
    :func:`teacher_scripts`: the claw agent's reference solutions) through a gateway with
    the scripted engine and ``harness``; the calls go to ``out_dir/teacher.db``. Returns the
    orchestrator's results (reward 1 = usable)."""
    from openforge.engines.scripted import ScriptedEngine
    from openforge.gateway.server import Gateway
    from openforge.rollouts import run_rollouts
    from openforge.rollouts.config import RolloutConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    scripts = out_dir / "scripts"
    scripts.mkdir(exist_ok=True)
    results: list[Any] = []
    for task in tasks:
        if scripts_for is not None:
            variants = await scripts_for(task)
        else:
            variants = await teacher_scripts(task, harness)
        if not variants:
            log.info("teacher: %s has no teacher script (no usable solution); skipped", task.id)
        for name, replies in variants.items():
            script = scripts / f"{task.id}.{name}.jsonl"  # ids may hold '/' (miniwob/x/1)
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in replies))
            # One scripted engine per variant: its replies are the k-th call of any rollout.
            engine = ScriptedEngine.for_model(script, model_dir)
            async with Gateway.at_store(engine, out_dir / "teacher.db", model=model_dir) as gw:
                config = RolloutConfig(
                    tasks=[task],
                    harness=harness,
                    gateway_url=gw.control_url,
                    admin_token=gw.admin_token,
                    harness_options=dict(harness_options),
                    n=1,
                    concurrency=1,
                    split=task.split,
                    out_dir=out_dir / "rollouts" / f"{task.id}.{name}",
                    metadata={"phase": "teacher", "variant": name},
                )
                results.extend(await run_rollouts(config))
    return results


async def export_teacher_sft(store_path: Path, out: Path) -> Path | None:
    """``openforge traces export --format sft`` of the teacher store; returns the tokenized
    file (``<out stem>.tokens.jsonl``), or None when no rollout passed."""
    from openforge.traces import export
    from openforge.traces.samples import FlagPolicy, FlagSeverity, Mode, TraceOptions
    from openforge.traces.source import load_blobs, open_store, plan_store

    store = open_store(store_path)
    try:
        # A teacher that went for a shortcut (the monitor flagged it) teaches nothing.
        options = TraceOptions(
            Mode.MERGED, flagged=FlagPolicy.DROP, flag_severity=FlagSeverity.MEDIUM
        )
        plan = await plan_store(store, options)
        blobs = await load_blobs(store, export.sft_image_digests(plan.plans))
    finally:
        await store.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    if not export.write_sft(plan.plans, out, blobs=blobs):
        return None
    return out.with_name(out.stem + ".tokens.jsonl")


def load_sft_samples(tokens_file: Path) -> list[SftSample]:
    """Tokenized SFT records → one sample per rollout path.

    The records are per call; a call whose ids extend the previous call's ids exactly
    (token-exact rendering) continues that path, so the shared prompt is trained on once.
    A path shows the images of its last call (an extension keeps every earlier one); their
    bytes are in the export's image folder (:func:`load_sft_images`).
    """
    paths: dict[str, list[tuple[list[int], list[int], list[SampleImage]]]] = {}
    for line in tokens_file.read_bytes().splitlines():
        if not line.strip():
            continue
        rec = orjson.loads(line)
        ids, mask = list(rec["input_ids"]), list(rec["loss_mask"])
        images = [SampleImage.from_record(d) for d in rec.get("images", [])]
        chain = paths.setdefault(str(rec["rollout_id"]), [])
        if chain and ids[: len(chain[-1][0])] == chain[-1][0]:
            prev_ids, prev_mask, _ = chain[-1]
            chain[-1] = (ids, prev_mask + mask[len(prev_ids) :], images)
        else:
            chain.append((ids, mask, images))
    out: list[SftSample] = []
    for rollout_id, chain in paths.items():
        for ids, mask, images in chain:
            start = mask.index(1) if 1 in mask else len(mask)
            out.append(
                SftSample(
                    rollout_id=rollout_id,
                    prompt_ids=ids[:start],
                    response_ids=ids[start:],
                    loss_mask=mask[start:],
                    logprobs=[0.0] * (len(ids) - start),
                    images=images,
                )
            )
    return out


def load_sft_images(tokens_file: Path) -> dict[str, bytes]:
    """The images an SFT export wrote beside ``tokens_file`` (``<stem>.images/``), by
    digest; empty for an export without images."""
    folder = tokens_file.with_name(tokens_file.name.removesuffix(".tokens.jsonl") + ".images")
    if not folder.is_dir():
        return {}
    return {f.stem: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}


def sft_batches(
    samples: Sequence[SftSample], epochs: int, batch: int, seed: int
) -> list[list[SftSample]]:
    """``epochs`` seeded shuffles of ``samples`` cut into updates of ``batch`` samples."""
    rng = random.Random(seed)
    out: list[list[SftSample]] = []
    for _ in range(epochs):
        order = list(samples)
        rng.shuffle(order)
        out.extend(order[i : i + batch] for i in range(0, len(order), batch))
    return out


async def teacher_samples(
    cfg: TrainConfig,
    tasks: Sequence[Task],
    model_dir: Path,
    scripts_for: TeacherScripts | None = None,
) -> list[SftSample]:
    """Record the teacher on ``tasks`` under ``<run_dir>/teacher`` (with ``cfg.harness``) and
    read its SFT samples."""
    out = Path(cfg.run_dir) / "teacher"
    done = out / "done.json"
    if done.is_file():  # a resumed run: the teacher finished before
        tokens_file = out / "sft.tokens.jsonl"
        samples = load_sft_samples(tokens_file) if tokens_file.is_file() else []
        log.info("teacher: recorded before (%d SFT samples in %s); skipped", len(samples), out)
        return samples
    options = dict(cfg.rollout_options.get("harness_options", {}))
    options.setdefault("max_tokens", cfg.max_tokens)
    started = time.perf_counter()
    results = await record_teacher(tasks, model_dir, out, options, cfg.harness, scripts_for)
    passed = sum(1 for r in results if (r.reward or 0.0) >= 1.0)
    tokens = await export_teacher_sft(out / "teacher.db", out / "sft.jsonl")
    samples = load_sft_samples(tokens) if tokens is not None else []
    log.info(
        "teacher: %d/%d reference solutions passed as %s trajectories in %.0f s -> %d SFT "
        "samples (%s)", passed, len(results), cfg.harness, time.perf_counter() - started,
        len(samples),
        out / "sft.jsonl",
    )  # fmt: skip
    done.write_bytes(orjson.dumps({"samples": len(samples), "rollouts": len(results)}))
    return samples


def sft_warmup(
    samples: Sequence[SftSample], batch: int = 4, images: Mapping[str, bytes] | None = None
) -> Warmup:
    """The warm-up for :func:`~openforge.training.loop.run_loop`: ``cfg.sft_epochs`` passes
    of :meth:`Trainer.sft_step` over ``samples`` (``batch`` samples per update), one
    ``sft`` metrics record per update, then the new weights pushed to the engine.
    ``images``: the bytes of the images the samples show, by digest."""

    async def run(cfg: TrainConfig, env: LoopEnv) -> None:
        from openforge.training.loop import save_checkpoint

        updates = sft_batches(samples, cfg.sft_epochs, batch, cfg.seed)
        # A resumed run goes on after the updates its last checkpoint holds (the batches
        # are the same: seeded); a checkpoint at the end of each epoch keeps them.
        first = int(env.resumed.get("sft_updates", 0))
        if first:
            log.info("sft: resuming at update %d/%d (checkpointed before)", first + 1, len(updates))
        per_epoch = max(len(updates) // max(cfg.sft_epochs, 1), 1)
        started = time.perf_counter()
        for i, group in enumerate(updates):
            if i < first:
                continue
            if i > first and i % per_epoch == 0:
                await save_checkpoint(cfg, env, 0, warmed_up=False, sft_updates=i)
            result = await asyncio.to_thread(
                env.trainer.sft_step, group, cfg.sft_learning_rate, images
            )
            if not result.accepted:
                log.warning("sft update %d rejected (%s)", i + 1, result.reason)
                continue
            env.metrics.write("sft", i, {**result.metrics, "version": result.version})
            log.info(
                "sft update %d/%d: loss %.3f, %.0f tokens/s",
                i + 1, len(updates), result.metrics["sft_loss"],
                result.metrics["train_tokens_per_s"],
            )  # fmt: skip
        if updates and env.trainer.version > 0:
            synced = await env.sync.push(env.trainer, env.trainer.version)
            log.info(
                "sft: %d updates in %.0f s; weights v%d pushed to the engine (%.1f s)",
                len(updates), time.perf_counter() - started, env.trainer.version,
                synced.export_s + synced.load_s,
            )  # fmt: skip

    return run
