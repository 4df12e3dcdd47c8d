"""Held-out rollouts stay out of training data: ``openforge traces export|stats|show`` take
training rollouts by default, select by ``--run``, ``--split`` and ``--task``, and refuse to
export held-out rollouts unless told to (a real SQLite and a real PostgreSQL store)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from openforge.cli import app
from openforge.store.location import open_store
from openforge.store.schemas import RolloutStatus
from openforge.traces.samples import TraceOptions
from openforge.traces.source import HeldOutError, iter_samples, plan_rollouts

from .store_data import MODEL_DIR, _Writer

runner = CliRunner()

# (run, split, task, reward) of each rollout; None: minted with no split (an older store).
_ROLLOUTS = [
    ("run-train", "train", "t1", 1.0),
    ("run-train", "train", "t1", 0.0),
    ("run-train", "train", "t2", 1.0),
    ("run-eval", "test", "t9", 1.0),
    ("run-eval", "test", "t9", 0.0),
    (None, None, "t1", 1.0),
]


async def _build(location: str) -> list[str]:
    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    store = open_store(location)
    w = _Writer(store, tok)
    prompt = w.enc("<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n")
    ids = []
    for run, split, task, reward in _ROLLOUTS:
        r = await store.create_rollout(task, f"{run}/{task}", run_id=run, split=split)
        await w.call(r.id, 0, prompt, "ls", conversation={"messages": []})
        await store.finish_rollout(r.id, RolloutStatus.COMPLETED, reward)
        ids.append(r.id)
    await store.close()
    return ids


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str]]:
    location = str(tmp_path / "s.db")
    if request.param == "postgresql":
        location = request.getfixturevalue("postgres_url")
    return location, asyncio.run(_build(location))


def _traces(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["traces", *args])
    return result.exit_code, result.output


def _exported(path: Path) -> list[str]:
    return [orjson.loads(line)["rollout"]["id"] for line in path.read_bytes().splitlines()]


def test_export_takes_training_rollouts_only(store: tuple[str, list[str]], tmp_path: Path) -> None:
    location, ids = store
    out = tmp_path / "all.jsonl"
    code, text = _traces("export", "--store", location, "--format", "jsonl", "--out", str(out))
    assert code == 0, text
    # The train rollouts and the one whose split was never recorded; never the test ones.
    assert _exported(out) == [ids[0], ids[1], ids[2], ids[5]]
    assert "left out: test 2" in text
    parquet = tmp_path / "train.parquet"
    code, text = _traces("export", "--store", location, "--out", str(parquet))
    assert code == 0 and "wrote 4 " in text, text


def test_export_refuses_held_out_unless_allowed(
    store: tuple[str, list[str]], tmp_path: Path
) -> None:
    location, ids = store
    out = tmp_path / "test.jsonl"
    for split in ("test", "all"):
        args = ["export", "--store", location, "--format", "jsonl", "--out", str(out)]
        code, text = _traces(*args, "--split", split)
        assert code == 1 and "2 held-out rollouts (test 2)" in text, text
        assert "--allow-held-out" in text and not out.exists()
    code, text = _traces(*args, "--split", "test", "--allow-held-out")
    assert code == 0, text
    assert _exported(out) == [ids[3], ids[4]]


def test_run_split_and_task_filters(store: tuple[str, list[str]], tmp_path: Path) -> None:
    location, ids = store
    out = tmp_path / "x.jsonl"
    base = ["export", "--store", location, "--format", "jsonl", "--out", str(out)]
    assert _traces(*base, "--run", "run-train", "--task", "t1")[0] == 0
    assert _exported(out) == [ids[0], ids[1]]
    assert _traces(*base, "--split", "train")[0] == 0  # recorded train rollouts only
    assert _exported(out) == [ids[0], ids[1], ids[2]]
    code, text = _traces(*base, "--run", "nope")
    assert code == 1 and "no rollouts selected" in text
    # stats count what export would take, and say what they leave out
    code, text = _traces("stats", "--store", location)
    assert code == 0 and "rollouts taken by split: none 1, train 3; left out: test 2" in text
    # show without an id lists the selected rollouts, with the ids `traces show` takes
    code, text = _traces("show", "--store", location, "--split", "test")
    assert code == 0, text
    listed = [line.split()[0] for line in text.splitlines() if line.startswith("ro_")]
    assert listed == [ids[3], ids[4]]
    assert "split=test" in text and "left out: none 1, train 3" in text
    code, text = _traces("show", ids[3], "--store", location, "--tokenizer", str(MODEL_DIR))
    assert code == 0 and "held out (split test)" in text and "run=run-eval" in text


async def _read(location: str, ids: list[str]) -> tuple[list[str], str]:
    store = open_store(location)
    try:
        samples = [s.rollout_id async for s in iter_samples(store, "merged")]
        with pytest.raises(HeldOutError) as refused:
            await plan_rollouts(store, [ids[0], ids[3]], TraceOptions())
        allowed = await plan_rollouts(store, [ids[3]], TraceOptions(), allow_held_out=True)
        assert [p.rollout.id for p in allowed] == [ids[3]]
    finally:
        await store.close()
    return samples, str(refused.value)


def test_library_readers_keep_held_out_out(store: tuple[str, list[str]]) -> None:
    """What a trainer reads: iter_samples (training rollouts only) and plan_rollouts (the
    built-in trainer's reader, which refuses a held-out rollout)."""
    location, ids = store
    samples, refused = asyncio.run(_read(location, ids))
    assert sorted(set(samples)) == sorted([ids[0], ids[1], ids[2], ids[5]])
    assert ids[3] in refused and "split test" in refused
