"""A self-contained HTML report of a run: reward curve, held-out pass@k before/after, and a
few trajectories with the trained tokens highlighted. No scripts, no external assets."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from openforge.traces.samples import Sample

__all__ = ["render_report", "reward_curve_svg", "trajectory_html"]

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}
pre{white-space:pre-wrap;background:#f7f7f7;padding:8px;border-radius:4px;font-size:12px}
.t{background:#c8f7c5}.meta{color:#666}
"""


def reward_curve_svg(
    points: Sequence[tuple[int, float]], width: int = 640, height: int = 220
) -> str:
    """An inline SVG polyline of ``(step, reward)``; rewards are assumed in [0, 1]."""
    if not points:
        return "<p class=meta>no training steps recorded</p>"
    pad = 30
    max_step = max(max(s for s, _ in points), 1)

    def xy(step: int, value: float) -> str:
        x = pad + (width - 2 * pad) * step / max_step
        y = height - pad - (height - 2 * pad) * max(0.0, min(1.0, value))
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(s, v) for s, v in points)
    dots = "".join(f'<circle cx="{xy(s, v).split(",")[0]}" cy="{xy(s, v).split(",")[1]}" r="3"/>'
                   for s, v in points)  # fmt: skip
    return (
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f'<rect width="100%" height="100%" fill="#fff" stroke="#ccc"/>'
        f'<text x="4" y="{pad - 8}" font-size="11">reward 1</text>'
        f'<text x="4" y="{height - pad + 14}" font-size="11">0 (step 0 … {max_step})</text>'
        f'<polyline fill="none" stroke="#2a6" stroke-width="2" points="{line}"/>'
        f'<g fill="#2a6">{dots}</g></svg>'
    )


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


def render_report(
    target: str | Path,
    title: str,
    records: Sequence[dict[str, Any]],
    samples: Sequence[Sample],
    decode: Callable[[list[int]], str],
) -> Path:
    """Write the report for ``records`` (``metrics.jsonl``) and example ``samples``."""
    train = [(int(r["step"]) + 1, float(r.get("reward_mean", 0.0))) for r in records
             if r.get("kind") in ("train", "skip") and "reward_mean" in r]  # fmt: skip
    evals = [r for r in records if r.get("kind") == "eval"]
    skipped = [r for r in records if r.get("kind") == "skip"]
    sft = [r for r in records if r.get("kind") == "sft"]
    body = [
        f"<h1>{html.escape(title)}</h1>",
        _sft_summary(sft),
        "<h2>Train reward per step</h2>",
        reward_curve_svg(train),
        f"<p class=meta>{len(skipped)} step(s) without an update "
        f"({html.escape(', '.join(sorted({str(r.get('reason')) for r in skipped})) or '-')})</p>",
        "<h2>Held-out evaluation</h2>",
        _eval_table(evals),
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
