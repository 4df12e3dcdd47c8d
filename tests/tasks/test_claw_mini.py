"""Every claw-mini task, in the real local sandbox: the reference solution scores 1 and an
untouched workspace scores 0. Foreign-format verifier wrappers run there too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxBackend
from openforge.sandboxes.base import SandboxSpec
from openforge.suites import load_tasks
from openforge.tasks import Task, run_verifier

from .conftest import score

pytestmark = pytest.mark.slow


async def test_every_reference_solution_scores_1_and_no_action_scores_0(
    backend: SandboxBackend,
) -> None:
    tasks = load_tasks("claw-mini").tasks
    sem = asyncio.Semaphore(4)

    async def both(task: Task) -> tuple[str, float, float]:
        async with sem:
            return task.id, await score(backend, task, False), await score(backend, task, True)

    scores = await asyncio.gather(*(both(t) for t in tasks))
    wrong = [(tid, empty, solved) for tid, empty, solved in scores if (empty, solved) != (0.0, 1.0)]
    assert wrong == []
    assert len(scores) >= 40


async def test_printing_the_answer_does_not_fool_a_verifier(backend: SandboxBackend) -> None:
    task = load_tasks("claw-mini").by_id()["count-lines"]
    box = await backend.create(SandboxSpec(network="none"))
    try:
        await box.put(task.workspace_bytes())
        # An agent that only prints (or tampers with the input to match a guess) gets 0.
        await box.exec('wc -l < data.txt; printf "x\\n" > data.txt; echo 1 > count.txt')
        assert (await run_verifier(box, task)).reward == 0.0
    finally:
        await box.close()


async def test_foreign_wrappers_run_in_the_sandbox(tmp_path: Path, backend: SandboxBackend) -> None:
    # Harbor and Terminal-Bench tasks run in their own images: tests/tasks/test_harbor_podman.py.
    (tmp_path / "suite").mkdir()
    q = tmp_path / "suite" / "task_01_q.md"
    q.write_text(
        "---\nid: q1\n---\n## Prompt\n\nWrite a.txt\n\n## Automated Checks\n\n```python\n"
        "import os\ndef grade(transcript, workspace_path):\n"
        "    ok = os.path.isfile(os.path.join(workspace_path, 'a.txt'))\n"
        "    return {'exists': 1.0 if ok else 0.0, 'always': 1.0}\n```\n"
    )
    ts = load_tasks(tmp_path / "suite")
    assert ts.errors == []
    by = ts.by_id()
    cases = [
        ("q1", "true", 0.5),
        ("q1", "touch a.txt", 1.0),
    ]
    for task_id, action, want in cases:
        box = await backend.create(SandboxSpec(network="none"))
        try:
            await box.exec(action)
            assert (await run_verifier(box, by[task_id])).reward == want, (task_id, action)
        finally:
            await box.close()
