"""The run report: labelled matplotlib plots as inline PNGs, held-out reward per skill,
cost; the summary's cost read back from a run directory; the train command's progress bar."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image
from rich.console import Console

from openforge.rollouts.config import RolloutResult
from openforge.tasks.model import Task
from openforge.training.metrics import mean_by_skill, skills
from openforge.training.plots import PANELS, skill_bars_png, step_curves_png
from openforge.training.progress import TrainProgress
from openforge.training.report import render_report
from openforge.training.summary import run_cost, write_summary

STEP_KEYS = ("reward_mean", "pass_rate", "groups_kept", "groups_zero_variance", "kl",
             "entropy", "clip_fraction", "tis_fraction", "mismatch_abs_logprob",
             "train_tokens_per_s", "engine_tokens_per_s", "rollout_s", "train_s")  # fmt: skip


def _records() -> list[dict[str, object]]:
    steps: list[dict[str, object]] = [
        {"kind": "train", "step": i, **{k: 0.1 * (i + 1) for k in STEP_KEYS}, "tokens": 100}
        for i in range(4)
    ]
    steps.append({"kind": "skip", "step": 4, "reward_mean": 0.0, "reason": "no reward variance"})
    evals = [
        {"kind": "eval", "step": 0, "tag": "before", "version": 0, "reward_mean": 0.1,
         "pass@1": 0.1, "per_skill": {"copy-file": 0.0, "count-words": 0.25}, "eval_s": 5.0},
        {"kind": "eval", "step": 5, "tag": "after", "version": 4, "reward_mean": 0.6,
         "pass@1": 0.6, "per_skill": {"copy-file": 0.75, "count-words": 0.5}, "eval_s": 6.0},
    ]  # fmt: skip
    return [{"kind": "sft", "step": 0, "sft_loss": 2.0, "version": 1, "train_s": 3.0,
             "tokens": 50}, *steps, *evals]  # fmt: skip


def _png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_every_panel_has_labelled_axes_and_the_plots_are_pngs() -> None:
    panel_keys = {key for p in PANELS for key, _ in p.series}
    assert panel_keys >= set(STEP_KEYS)
    assert all(p.title and p.ylabel for p in PANELS)
    curves = _png(step_curves_png(_records()))
    assert curves.format == "PNG" and curves.width > 600 and curves.height > 600
    bars = skill_bars_png([r for r in _records() if r["kind"] == "eval"])
    assert bars is not None and _png(bars).format == "PNG"
    assert skill_bars_png([{"kind": "eval", "tag": "before"}]) is None


def test_report_embeds_the_plots_and_the_per_skill_table(tmp_path: Path) -> None:
    page = render_report(tmp_path / "r.html", "run <1>", _records(), [], str, "<p>COST</p>")
    html = page.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 2
    assert all(_png(base64.b64decode(i)).format == "PNG" for i in images)
    assert "run &lt;1&gt;" in html and "<p>COST</p>" in html
    assert "<td style=text-align:left>copy-file</td><td>0.00</td><td>0.75</td>" in html
    assert "1 step(s) without an update (no reward variance)" in html
    assert "<script" not in html  # self-contained and static


def test_skills_are_the_tags_not_every_task_carries() -> None:
    tasks = [
        Task(id="a-0", instruction="", path=Path("."), tags=("drill", "copy")),
        Task(id="a-1", instruction="", path=Path("."), tags=("drill", "copy")),
        Task(id="b-0", instruction="", path=Path("."), tags=("drill", "sort")),
        Task(id="c-0", instruction="", path=Path("."), tags=("drill",)),
    ]
    skill_of = skills(tasks)
    assert skill_of == {"a-0": "copy", "a-1": "copy", "b-0": "sort", "c-0": "c-0"}
    by_task = {"a-0": [1.0, 0.0], "a-1": [1.0, 1.0], "b-0": [0.0]}
    assert mean_by_skill(by_task, skill_of) == {"copy": 0.75, "sort": 0.0}


def _write_results(path: Path, results: list[RolloutResult]) -> None:
    import dataclasses

    path.mkdir(parents=True)
    lines = [json.dumps(dataclasses.asdict(r)) for r in results]
    (path / "results.jsonl").write_text("\n".join(lines) + "\n")


def test_summary_reads_the_cost_back_from_the_run_directory(tmp_path: Path) -> None:
    def res(task: str, total: float, prompt: int) -> RolloutResult:
        usage = {"policy": {"calls": 1, "prompt": prompt, "output": 4}}
        return RolloutResult(task_id=task, sample=0, status="completed", reward=1.0,
                             timings={"total": total}, usage=usage)  # fmt: skip

    _write_results(tmp_path / "teacher" / "rollouts" / "t.bash", [res("t", 2.0, 10)])
    _write_results(tmp_path / "rollouts" / "eval-before", [res("e", 3.0, 20)])
    _write_results(tmp_path / "rollouts" / "step-000000", [res("s", 5.0, 30), res("u", 1, 40)])
    cost = run_cost(tmp_path, _records(), wall_s=99.0)
    assert cost.rollouts == 4 and cost.sandbox_s == 11.0
    assert cost.tokens["teacher"].prompt == 10  # the scripted teacher's calls
    assert cost.tokens["policy"].prompt == 90 and cost.tokens["policy"].calls == 3
    assert cost.trainer_tokens == 4 * 100 + 50
    assert cost.phases_s["teacher"] == 2.0
    assert cost.phases_s["evaluation"] == 11.0 and cost.phases_s["SFT updates"] == 3.0
    assert cost.phases_s["GRPO updates"] == pytest.approx(1.0)  # train_s 0.1 + … + 0.4
    assert cost.phases_s["GRPO rollouts"] == pytest.approx(1.0)
    out, _ = write_summary(tmp_path, _records(), 99.0)
    body = json.loads(out.read_text())
    assert body["cost"]["wall_s"] == 99.0 and body["steps"] == 5
    assert [e["tag"] for e in body["evaluations"]] == ["before", "after"]


def test_progress_bar_shows_step_reward_and_held_out(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=False)
    with TrainProgress(5, console) as bar:
        for record in _records():
            bar.record(record)
        task = bar.progress.tasks[0]
        assert task.completed == 5 and task.total == 5
        assert "reward 0.00" in task.fields["status"]  # the skipped last step's reward
        assert "held-out 0.60 (after)" in task.fields["status"]
    assert "GRPO step" in buf.getvalue() and "5/5" in buf.getvalue()
