"""``openforge traces`` against a real SQLite store written through the Store API."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from typer.testing import CliRunner

from openforge.cli import app

from .store_data import MODEL_DIR, Built

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["traces", *args])
    return result.exit_code, result.output


def test_verl_parquet_merged(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "train.parquet"
    code, text = _run("export", "--store", str(built.path), "--format", "verl", "--out", str(out))
    assert code == 0, text
    assert "infra_error: 1" in text and "running: 1" in text
    table = pq.read_table(out)
    for name in (
        "prompts",
        "responses",
        "input_ids",
        "attention_mask",
        "position_ids",
        "response_mask",
        "rollout_log_probs",
        "token_level_scores",
        "uid",
    ):
        assert name in table.column_names
    rows = table.to_pylist()
    # good: one merged path; bad: main path + the compaction fork; teacher rollout: none.
    assert sorted(r["rollout_id"] for r in rows) == sorted(
        [built.ids["good"], built.ids["bad"], built.ids["bad"]]
    )
    for r in rows:
        assert r["input_ids"] == r["prompts"] + r["responses"]
        assert len(r["response_mask"]) == len(r["responses"]) == len(r["token_level_scores"])
        assert r["response_mask"][-1] == 1
        assert r["token_level_scores"][-1] == r["reward"]
        assert sum(r["token_level_scores"][:-1]) == 0
        assert r["uid"] == "g1"
        assert r["position_ids"] == list(range(len(r["input_ids"])))
    good = next(r for r in rows if r["rollout_id"] == built.ids["good"])
    assert len(good["call_ids"]) == 2  # the retry was deduplicated
    assert 0 in good["response_mask"]  # the tool result sits between the two answers


def test_per_call_mode_and_include_running(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "pc.parquet"
    args = ["export", "--store", str(built.path), "--mode", "per_call", "--out", str(out)]
    assert _run(*args)[0] == 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 5 and all(set(r["response_mask"]) == {1} for r in rows)
    # The running rollout has no reward, so even with --include-running an RL export skips it.
    code, text = _run(*args, "--include-running")
    assert code == 0 and "unscored: 1" in text
    code, _ = _run(
        "export",
        "--store",
        str(built.path),
        "--format",
        "jsonl",
        "--out",
        str(tmp_path / "a.jsonl"),
        "--include-running",
    )
    recs = [orjson.loads(x) for x in (tmp_path / "a.jsonl").read_bytes().splitlines()]
    running = next(r for r in recs if r["rollout"]["id"] == built.ids["running"])
    assert running["excluded"] is None and len(running["samples"]) == 1


def test_jsonl_and_mask_forks(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    assert (
        _run(
            "export",
            "--store",
            str(built.path),
            "--format",
            "jsonl",
            "--mask-forks",
            "--out",
            str(out),
        )[0]
        == 0
    )
    recs = {r["rollout"]["id"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    assert len(recs) == 5
    assert recs[built.ids["infra"]]["excluded"] == "infra_error"
    assert recs[built.ids["running"]]["excluded"] == "running"
    bad = recs[built.ids["bad"]]
    assert [n["drift"] for n in bad["nodes"]].count("fork") == 1
    assert [n["excluded"] for n in bad["nodes"]].count("fork") == 1
    assert len(bad["samples"]) == 1 and bad["drift"][0]["position"] == 12
    good = recs[built.ids["good"]]
    assert good["counts"]["retries"] == 1 and good["counts"]["retry_headers"] == 1


def test_sft_export(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    code, text = _run("export", "--store", str(built.path), "--format", "sft", "--out", str(out))
    assert code == 0, text
    chats = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    # Two trained calls of the rewarded rollout and the teacher's call.
    assert len(chats) == 3
    for c in chats:
        assert c["messages"][0] == {"role": "system", "content": "You are a coding agent."}
        assert c["messages"][-1]["role"] == "assistant"
        assert c["tools"][0]["function"]["name"] == "bash"
    assert chats[-1]["messages"][-1]["content"] == "Use `ls -la`."
    tokens = [orjson.loads(x) for x in (tmp_path / "sft.tokens.jsonl").read_bytes().splitlines()]
    assert len(tokens) == 2 and all(len(t["input_ids"]) == len(t["loss_mask"]) for t in tokens)


def test_stats(built: Built) -> None:
    code, text = _run("stats", "--store", str(built.path))
    assert code == 0, text
    for needle in ("merge compression", "retries", "forks", "drifted turns", "infra_error"):
        assert needle in text


def test_show_terminal_and_html(built: Built, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    code, text = _run(
        "show",
        built.ids["bad"],
        "--store",
        str(built.path),
        "--html",
        str(page),
        "--tokenizer",
        str(MODEL_DIR),
    )
    assert code == 0, text
    assert "fork at call #3: history edited" in text and "I will run ls." in text
    html = page.read_text()
    assert "<script" not in html and "class='trained'" in html and "h2 class='fork'" in html
    assert "a.py b.py" in html


def test_bad_input(built: Built, tmp_path: Path) -> None:
    code, text = _run("export", "--store", str(tmp_path / "nope.db"), "--out", str(tmp_path / "x"))
    assert code == 1 and "no store at" in text
    code, text = _run("show", "ro_missing", "--store", str(built.path))
    assert code == 1 and "no rollout 'ro_missing'" in text
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    import asyncio

    from openforge.store.sqlite import SqliteStore

    async def make_empty() -> None:
        await SqliteStore(empty).close()

    empty.unlink()
    asyncio.run(make_empty())
    code, text = _run("export", "--store", str(empty), "--out", str(tmp_path / "e.parquet"))
    assert code == 1 and "nothing to export" in text
    with sqlite3.connect(built.path) as conn:
        conn.execute("UPDATE schema_version SET version = 0")
    code, text = _run("stats", "--store", str(built.path))
    assert code == 1 and "schema version 0" in text
