"""``openforge traces export|show|stats`` read a PostgreSQL store exactly as a SQLite one:
the same rollouts written to both give the same samples, counters and views."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pyarrow.parquet as pq
from typer.testing import CliRunner

from openforge.cli import app

from .store_data import MODEL_DIR, Built, build

runner = CliRunner()


def _run(*args: str) -> str:
    result = runner.invoke(app, ["traces", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _same_ids(text: str, pg: Built, lite: Built) -> str:
    """``text`` with the PostgreSQL build's rollout ids replaced by the SQLite build's."""
    for role, rollout_id in pg.ids.items():
        text = text.replace(rollout_id, lite.ids[role])
    return text


def test_traces_read_postgres_like_sqlite(postgres_url: str, tmp_path: Path) -> None:
    lite = asyncio.run(build(tmp_path / "store.db"))
    pg = asyncio.run(build(postgres_url))
    outputs: dict[str, dict[str, str]] = {}
    for name, built in (("sqlite", lite), ("postgresql", pg)):
        store = str(built.path)
        out = tmp_path / name
        _run("export", "--store", store, "--format", "jsonl", "--out", str(out / "s.jsonl"))
        _run("export", "--store", store, "--format", "verl", "--out", str(out / "s.parquet"))
        page = out / "bad.html"
        show = _run(
            "show", built.ids["bad"], "--store", store, "--html", str(page),
            "--tokenizer", str(MODEL_DIR),
        )  # fmt: skip
        outputs[name] = {
            "jsonl": (out / "s.jsonl").read_text(),
            "parquet": orjson.dumps(pq.read_table(out / "s.parquet").to_pylist()).decode(),
            # The table's rows (its title names the store, wrapped to the terminal).
            "stats": "\n".join(x for x in _run("stats", "--store", store).splitlines() if "│" in x),
            "show": show.replace(str(page), "PAGE"),
            "html": page.read_text(),
        }
    assert outputs["sqlite"]["jsonl"].count("\n") > 3
    for kind, text in outputs["postgresql"].items():
        assert _same_ids(text, pg, lite) == outputs["sqlite"][kind], kind
