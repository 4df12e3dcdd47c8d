"""claw-drill: generated deterministically, train and test names disjoint, loaded by name from
its cache, and every instance's reference solution scores 1 (an untouched workspace 0) in the
real bubblewrap sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxBackend
from openforge.suites import load_tasks
from openforge.suites.drills.generate import (
    DRILL_FAMILIES,
    DRILL_VERSION,
    TEST_WORDS,
    TRAIN_WORDS,
    drill_suite,
    generate_drills,
    task_level,
)
from openforge.tasks import Task

from .conftest import score

# The default suite's digest. When generation changes on purpose, bump DRILL_VERSION (so
# cached suites are regenerated) and put the new digest here.
DEFAULT_DIGEST = "2a5b53f91f41fbd070250a3edf6af19780df39a719453add2af7b0baf3b3e7a6"


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        if p.is_file():
            h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


@pytest.fixture
def drills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Task]:
    monkeypatch.setenv("OPENFORGE_TASKS_DIR", str(tmp_path / "cache"))
    ts = load_tasks("claw-drill")
    assert ts.errors == []
    return ts.tasks


def test_generation_is_deterministic_and_counts_only_add(tmp_path: Path) -> None:
    a = generate_drills(tmp_path / "a")
    b = generate_drills(tmp_path / "b")
    assert _digest(a) == _digest(b)
    assert _digest(a) == DEFAULT_DIGEST, (
        f"generation changed: bump DRILL_VERSION "
        f"(now {DRILL_VERSION}) and set DEFAULT_DIGEST = {_digest(a)!r}"
    )
    more = generate_drills(tmp_path / "more", train_per_family=8, test_per_family=3)
    for task_dir in a.iterdir():
        assert _digest(task_dir) == _digest(more / task_dir.name)
    assert len(list(more.iterdir())) == len(DRILL_FAMILIES) * 11
    assert _digest(generate_drills(tmp_path / "s1", seed=1)) != _digest(a)
    with pytest.raises(FileExistsError, match="not an empty directory"):
        generate_drills(a)


def test_train_and_test_never_share_a_name_or_word(drills: list[Task]) -> None:
    assert not set(TRAIN_WORDS) & set(TEST_WORDS)
    pool = TRAIN_WORDS + TEST_WORDS
    # sed s/A/B/g and grep -c P act on substrings; no word may hide inside another.
    assert [(a, b) for a in pool for b in pool if a != b and a in b] == []
    for task in drills:
        text = " ".join(
            [
                task.instruction,
                *(v.decode() for v in task.workspace_bytes().values()),
                *(v.decode() for v in task.solution_bytes().values()),
            ]
        )
        tokens = set(re.findall(r"[a-z]+", text.lower()))
        other = TEST_WORDS if task.split == "train" else TRAIN_WORDS
        assert not tokens & set(other), (task.id, tokens & set(other))


def test_the_suite_loads_by_name_with_every_family_in_both_splits(
    drills: list[Task], tmp_path: Path
) -> None:
    assert len(drills) == len(DRILL_FAMILIES) * 8 == 136
    for family in DRILL_FAMILIES:
        mine = [t for t in drills if t.tags == ("drill", family)]
        assert sorted(t.split for t in mine) == ["test"] * 2 + ["train"] * 6, family
        assert all(t.id.startswith(f"drill-{family}-{t.split}-") for t in mine)
        assert all(len(t.instruction) < 160 for t in mine)
        assert all(len(v.splitlines()) <= 30 for t in mine for v in t.workspace_bytes().values())
    assert len(set(t.instruction for t in drills)) == len(drills)
    # Generated once, then reused; no temporary directory is left beside it.
    cache = tmp_path / "cache"
    assert [p.name for p in cache.iterdir()] == [f"claw-drill-v{DRILL_VERSION}"]
    assert (
        load_tasks("claw-drill", split="test").tasks[0].path.parent
        == cache / f"claw-drill-v{DRILL_VERSION}"
    )
    assert len(load_tasks("claw-drill", split="test").tasks) == 34


def test_concurrent_first_loads_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENFORGE_TASKS_DIR", str(tmp_path))
    with ThreadPoolExecutor(4) as pool:
        roots = list(pool.map(lambda _: drill_suite(), range(4)))
    assert len(set(roots)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [roots[0].name]
    assert load_tasks(roots[0]).errors == [] and len(load_tasks(roots[0]).tasks) == 136


@pytest.mark.slow
async def test_every_reference_solution_scores_1_and_no_action_scores_0(
    drills: list[Task], backend: SandboxBackend
) -> None:
    sem = asyncio.Semaphore(4)

    async def both(task: Task) -> tuple[str, float, float]:
        async with sem:
            return task.id, await score(backend, task, False), await score(backend, task, True)

    scores = await asyncio.gather(*(both(t) for t in drills))
    assert [s for s in scores if s[1:] != (0.0, 1.0)] == []


# Plausible wrong answers each verifier must refuse: the skill's near miss.
_NEAR_MISSES = {
    "rename-file": "cp {0} {1}",  # the source must be gone
    "copy-file": "mv {0} {1}",  # the source must stay
    "append-line": "echo x > {0}",  # earlier lines must be kept
    "delete-file": "rm -f ./*",  # only the named file goes
    "make-dir": "touch {0}",  # a file is not a directory
    "count-lines": "wc -l {0} > {1}",  # "17 data.txt" is not the number
    "max-number": "sort -n {0} | head -n 1 > {1}",
    "first-line": "head -n 2 {0} > {1}",
}


@pytest.mark.slow
async def test_near_misses_score_0(
    drills: list[Task], backend: SandboxBackend, tmp_path: Path
) -> None:
    for family, wrong in _NEAR_MISSES.items():
        task = next(t for t in drills if t.tags == ("drill", family) and t.split == "train")
        names = task.solution_bytes()["solve.sh"].decode().splitlines()[-1].split()
        files = [w for w in names if "." in w and not w.startswith("'")] or names[1:]
        sol = tmp_path / family / "solution" / "solve.sh"
        sol.parent.mkdir(parents=True)
        sol.write_text(f"#!/bin/sh\n{wrong.format(*files)}\n")
        task.solution = {"solve.sh": sol}
        assert await score(backend, task, True) == 0.0, (family, wrong.format(*files))


def test_levels_leave_level_0_alone_and_draw_their_own_streams(tmp_path: Path) -> None:
    plain = generate_drills(tmp_path / "plain", train_per_family=1, test_per_family=1)
    leveled = generate_drills(
        tmp_path / "lv", train_per_family=1, test_per_family=1, levels=(0, 1, 2)
    )
    for task_dir in plain.iterdir():  # level 0 is the plain suite, byte for byte
        assert _digest(task_dir) == _digest(leveled / task_dir.name)
    ts = load_tasks(leveled)
    assert ts.errors == [] and len(ts.tasks) == len(DRILL_FAMILIES) * 2 * 3
    by_id = {t.id: t for t in ts.tasks}
    two = by_id["drill-count-lines-L2-train-0"]
    assert two.tags == ("drill", "count-lines", "level-2")
    assert task_level(two.tags) == 2 and task_level(("drill", "count-lines")) == 0
    where = two.instruction.split(":")[0].removeprefix("Inside the directory ")
    assert len(where.split("/")) == 2
    files = two.workspace_bytes()
    # the input under the directory, and a decoy of the same name at the root
    inner = [rel for rel in files if rel.startswith(where + "/")]
    assert len(inner) == 1 and inner[0].split("/")[-1] in files
    assert files[inner[0]] != files[inner[0].split("/")[-1]]
    # a new test seed changes only the test instances
    other = generate_drills(tmp_path / "t9", train_per_family=1, test_per_family=1, test_seed=9)
    changed = {d.name for d in plain.iterdir() if _digest(d) != _digest(other / d.name)}
    assert changed == {d.name for d in plain.iterdir() if "-test-" in d.name}
    with pytest.raises(ValueError, match="levels"):
        generate_drills(tmp_path / "bad", levels=(5,))


@pytest.mark.slow
async def test_leveled_solutions_score_1_and_the_plain_command_at_the_root_0(
    tmp_path: Path, backend: SandboxBackend
) -> None:
    """At levels 1-2 the reference solution passes, an untouched workspace fails, and the
    level-0 command run at the workspace root (ignoring the directory) fails."""
    root = generate_drills(tmp_path / "lv", train_per_family=1, test_per_family=0, levels=(1, 2))
    tasks = load_tasks(root).tasks
    sem = asyncio.Semaphore(4)

    async def three(task: Task) -> tuple[str, float, float, float]:
        async with sem:
            solved, untouched = await score(backend, task, True), await score(backend, task, False)
            command = task.solution_bytes()["solve.sh"].decode().splitlines()[-1]
            root_only = tmp_path / task.id / "solve.sh"
            root_only.parent.mkdir(parents=True)
            root_only.write_text(f"#!/bin/sh\n({command.split(' && ', 1)[1]}) || true\n")
            task.solution = {"solve.sh": root_only}
            return task.id, solved, untouched, await score(backend, task, True)

    scores = await asyncio.gather(*(three(t) for t in tasks))
    assert len(scores) == len(DRILL_FAMILIES) * 2
    assert [s for s in scores if s[1:] != (1.0, 0.0, 0.0)] == []
