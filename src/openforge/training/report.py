"""A self-contained HTML report of a run: per-step training curves (``training/plots.py``),
held-out pass@k and reward per skill before/after, what the run cost, and a few trajectories
with the trained tokens highlighted. No scripts, no external assets (plots are inline PNGs)."""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from openforge.rollouts.config import RolloutResult
from openforge.rollouts.cost import Prices, cost_html
from openforge.traces.samples import Sample
from openforge.training.config import TrainConfig
from openforge.training.plots import skill_bars_png, step_curves_png

__all__ = ["png_img", "render_report", "trajectory_html", "write_run_report"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}
pre{white-space:pre-wrap;background:#f7f7f7;padding:8px;border-radius:4px;font-size:12px}
.t{background:#c8f7c5}.meta{color:#666}img{max-width:100%}
"""


def png_img(png: bytes, alt: str) -> str:
    """An ``<img>`` with the PNG inline as a data URL (the report stays one file)."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def trajectory_html(sample: Sample, decode: Callable[[list[int]], str]) -> str:
    """The sample's response with trained tokens (loss mask 1) highlighted."""
    parts: list[str] = []
    run: list[int] = []
    current = None
    for tok, m in zip(sample.response_ids, sample.loss_mask, strict=True):
        if current is not None and m != current:
            parts.append(_span(decode(run), bool(current)))
            run = []
        run.append(tok)
        current = m
    if run:
        parts.append(_span(decode(run), bool(current)))
    prompt_tail = decode(sample.prompt_ids[-200:])
    return (
        f"<h3>{html.escape(sample.task_id or '?')} · reward {sample.reward}</h3>"
        f"<p class=meta>rollout {html.escape(sample.rollout_id)}, "
        f"{len(sample.prompt_ids)} prompt tokens (last 200 shown), "
        f"{sum(sample.loss_mask)} trained tokens, weight versions "
        f"{html.escape(', '.join(sample.weight_versions))}</p>"
        f"<pre>…{html.escape(prompt_tail)}{''.join(parts)}</pre>"
    )


def _span(text: str, trained: bool) -> str:
    escaped = html.escape(text)
    return f'<span class="t">{escaped}</span>' if trained else escaped


def _eval_table(evals: Sequence[dict[str, Any]]) -> str:
    if not evals:
        return "<p class=meta>no evaluation</p>"
    keys = sorted({k for e in evals for k in e if k.startswith("pass@")})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in ["", "version", "reward", *keys])
    rows = []
    for e in evals:
        cells = [html.escape(str(e.get("tag"))), str(e.get("version")),
                 f"{e.get('reward_mean', 0.0):.3f}"]  # fmt: skip
        cells += [f"{e.get(k, 0.0):.3f}" for k in keys]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _sft_summary(sft: Sequence[dict[str, Any]]) -> str:
    if not sft:
        return ""
    losses = [float(r.get("sft_loss", 0.0)) for r in sft]
    return (
        "<h2>SFT warm-up</h2><p>"
        f"{len(sft)} updates on the teacher trajectories (reference solutions as claw tool "
        f"calls); cross-entropy {losses[0]:.3f} → {losses[-1]:.3f}, "
        f"weights v{sft[-1].get('version')}</p>"
    )


def _skill_table(evals: Sequence[dict[str, Any]]) -> str:
    tagged = [e for e in evals if isinstance(e.get("per_skill"), dict) and e["per_skill"]]
    if not tagged:
        return ""
    skills = sorted({s for e in tagged for s in e["per_skill"]})
    head = "".join(f"<th>{html.escape(str(e.get('tag')))}</th>" for e in tagged)
    rows = "".join(
        f"<tr><td style=text-align:left>{html.escape(s)}</td>"
        + "".join(f"<td>{float(e['per_skill'].get(s, 0.0)):.2f}</td>" for e in tagged)
        + "</tr>"
        for s in skills
    )
    return f"<table><tr><th>skill</th>{head}</tr>{rows}</table>"


def render_report(
    target: str | Path,
    title: str,
    records: Sequence[dict[str, Any]],
    samples: Sequence[Sample],
    decode: Callable[[list[int]], str],
    cost_html: str = "",
) -> Path:
    """Write the report for ``records`` (``metrics.jsonl``), example ``samples`` and the
    run's cost (``cost_html``, from :func:`openforge.rollouts.cost.cost_html`)."""
    steps = [r for r in records if r.get("kind") in ("train", "skip")]
    evals = [r for r in records if r.get("kind") == "eval"]
    skipped = [r for r in records if r.get("kind") == "skip"]
    sft = [r for r in records if r.get("kind") == "sft"]
    skill_png = skill_bars_png(evals)
    body = [
        f"<h1>{html.escape(title)}</h1>",
        _sft_summary(sft),
        "<h2>Training, per GRPO step</h2>",
        png_img(step_curves_png(records), "per-step training curves")
        if steps
        else "<p class=meta>no training steps recorded</p>",
        f"<p class=meta>{len(skipped)} step(s) without an update "
        f"({html.escape(', '.join(sorted({str(r.get('reason')) for r in skipped})) or '-')})</p>",
        "<h2>Held-out evaluation</h2>",
        _eval_table(evals),
        "<h3>Per skill</h3>" if skill_png else "",
        png_img(skill_png, "held-out reward per skill") if skill_png else "",
        _skill_table(evals),
        "<h2>What the run cost</h2>" + cost_html if cost_html else "",
        "<h2>Trajectories</h2><p class=meta>highlighted: tokens the policy sampled and was "
        "trained on</p>",
        *(trajectory_html(s, decode) for s in samples),
    ]
    out = Path(target)
    out.write_text(
        f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style>{''.join(body)}"
    )
    return out


async def write_run_report(
    cfg: TrainConfig,
    store_path: Path,
    wall_s: float,
    prices: Prices | None = None,
    title: str | None = None,
    examples: int = 3,
) -> Path:
    """``report.html`` and ``summary.json`` of a run: its metrics, what it cost (priced with
    ``prices``) and a few trained samples (the best-rewarded rollouts in its store)."""
    from transformers import AutoTokenizer

    from openforge.models.registry import resolve_model
    from openforge.traces.source import open_store
    from openforge.training.loop import read_samples
    from openforge.training.metrics import MetricsWriter
    from openforge.training.summary import write_summary

    run_dir = Path(cfg.run_dir)
    records = MetricsWriter(run_dir, tensorboard=False).read()
    _, cost = write_summary(run_dir, records, wall_s, prices)
    tokenizer: Any = AutoTokenizer.from_pretrained(str(resolve_model(cfg.model)))
    store = open_store(store_path)
    try:
        finished = [r for r in await store.rollouts() if r.reward is not None]
        best = sorted(finished, key=lambda r: -(r.reward or 0.0))[:examples]
        results = [
            RolloutResult(
                task_id=r.task_id or "?",
                sample=0,
                status=str(r.status),
                reward=r.reward,
                rollout_id=r.id,
                group_id=r.group_id,
            )
            for r in best
        ]
        # Examples to look at, not training data: held-out rollouts may be among them.
        samples, _ = await read_samples(store, results, "merged", allow_held_out=True)
    finally:
        await store.close()
    return render_report(
        run_dir / "report.html",
        title or f"OpenForge: {cfg.model} + {cfg.harness} on {cfg.tasks}",
        records,
        samples[:examples],
        lambda ids: str(tokenizer.decode(ids)),
        cost_html(cost, prices),
    )
