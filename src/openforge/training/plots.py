"""The run report's plots: per-step training curves and held-out reward per skill, drawn with
matplotlib (headless Agg backend) as PNG bytes for embedding in ``report.html``.

Each panel is one quantity a researcher checks when a GRPO run misbehaves: is the reward
rising, how many groups carried a signal, is the policy drifting (KL) or collapsing
(entropy), how often PPO-clip and truncated IS bite, how far the trainer's logprobs are
from the engine's, and the throughput of both halves.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only (before pyplot is imported)

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

__all__ = ["PANELS", "Panel", "skill_bars_png", "step_curves_png"]


@dataclass(frozen=True, slots=True)
class Panel:
    """One subplot: the metrics keys drawn in it (label per key) and its y-axis label."""

    title: str
    ylabel: str
    series: tuple[tuple[str, str], ...]  # (metrics key, legend label)
    missing: str = "not recorded"  # shown when no record has any of its keys


PANELS: tuple[Panel, ...] = (
    Panel("Train reward", "mean reward / pass rate",
          (("reward_mean", "reward"), ("pass_rate", "pass rate"))),
    Panel("Groups with a reward spread", "groups",
          (("groups_kept", "kept"), ("groups_zero_variance", "no spread (dropped)"),
           ("groups_solved", "solved (self-imitation)"),
           ("groups_kl_only", "no spread, KL only"))),
    Panel("KL to the reference", "k3 KL per token", (("kl", "KL"),),
          "not measured: no reference model (kl_coef 0)"),
    Panel("Policy entropy", "nats per token", (("entropy", "entropy"),)),
    Panel("Clipped / truncated tokens", "fraction of trained tokens",
          (("clip_fraction", "PPO-clip"), ("tis_fraction", "TIS cap"))),
    Panel("Engine vs trainer logprobs", "mean |Δ logprob| per token",
          (("mismatch_abs_logprob", "|trainer − engine|"),)),
    Panel("Throughput", "tokens / s",
          (("train_tokens_per_s", "trainer"), ("engine_tokens_per_s", "engine (sampled)"))),
    Panel("Wall time per step", "seconds",
          (("rollout_s", "rollouts"), ("train_s", "update"), ("sync_load_s", "weight load"))),
)  # fmt: skip


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _draw(ax: Axes, panel: Panel, records: Sequence[Mapping[str, Any]]) -> None:
    drawn = False
    for key, label in panel.series:
        points = [
            (int(r["step"]) + 1, float(r[key]))
            for r in records
            if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)
        ]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
            drawn = True
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("GRPO step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    if drawn and len(panel.series) > 1:
        ax.legend(fontsize=8)
    if not drawn:
        ax.text(0.5, 0.5, panel.missing, ha="center", va="center", transform=ax.transAxes,
                wrap=True)  # fmt: skip


def step_curves_png(records: Sequence[Mapping[str, Any]]) -> bytes:
    """A grid of :data:`PANELS` over the run's ``train`` and ``skip`` records, as PNG."""
    steps = [r for r in records if r.get("kind") in ("train", "skip")]
    cols = 2
    rows = (len(PANELS) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.9 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, PANELS, strict=False):
        _draw(ax, panel, steps)
    for ax in list(axes.flat)[len(PANELS) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return _png(fig)


def skill_bars_png(evals: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Held-out mean reward per skill, one bar per evaluation (``before``, ``after``, …),
    from the ``per_skill`` field of ``eval`` records; None when no record has one."""
    tagged = [e for e in evals if isinstance(e.get("per_skill"), dict) and e["per_skill"]]
    if not tagged:
        return None
    skills = sorted({s for e in tagged for s in e["per_skill"]})
    width = 0.8 / len(tagged)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(skills) + 2), 3.6))
    for i, e in enumerate(tagged):
        xs = [j + (i - (len(tagged) - 1) / 2) * width for j in range(len(skills))]
        ys = [float(e["per_skill"].get(s, 0.0)) for s in skills]
        ax.bar(xs, ys, width=width, label=f"{e.get('tag')} (v{e.get('version')})")
    ax.set_xticks(range(len(skills)))
    ax.set_xticklabels(skills, rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("skill (task tag)")
    ax.set_ylabel("held-out mean reward")
    ax.set_ylim(0, 1.05)
    ax.set_title("Held-out reward per skill", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)
