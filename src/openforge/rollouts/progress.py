"""The live progress display and the end-of-run summary table (rich)."""

from __future__ import annotations

import time
from collections import Counter

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforge.rollouts.config import STATUSES, RolloutResult
from openforge.rollouts.metrics import RunSummary

__all__ = ["LiveCounts", "flagged_line", "summary_table"]

_STYLE = {"completed": "green", "agent_error": "yellow", "timeout": "magenta", "infra_error": "red"}


class LiveCounts:
    """Counts per status, running rollouts, mean reward and rate, rendered as one renderable."""

    def __init__(self, total: int, skipped: int) -> None:
        self.counts: Counter[str] = Counter()
        self.running = 0
        self.rewards: list[float] = []
        self.skipped = skipped
        self.t0 = time.monotonic()
        self.progress = Progress(
            TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        self.bar = self.progress.add_task("rollouts", total=total)

    def started(self, task_id: str, sample: int) -> None:
        """A rollout took a concurrency slot."""
        self.running += 1

    def finished(self, res: RolloutResult) -> None:
        """A rollout ended."""
        self.running -= 1
        self.counts[res.status] += 1
        if res.reward is not None:
            self.rewards.append(res.reward)
        self.progress.advance(self.bar)

    def __rich__(self) -> Group:
        done = sum(self.counts.values())
        rate = done / max(time.monotonic() - self.t0, 1e-9)
        mean = f"{sum(self.rewards) / len(self.rewards):.3f}" if self.rewards else "-"
        parts = [f"running [bold]{self.running}[/]"]
        parts += [f"{s} [{_STYLE[s]}]{self.counts.get(s, 0)}[/]" for s in STATUSES]
        parts += [f"mean reward {mean}", f"{rate:.1f}/s"]
        if self.skipped:
            parts.append(f"skipped (done before) {self.skipped}")
        return Group(self.progress, "  ".join(parts))


def summary_table(summary: RunSummary, ks: list[int], per_task: bool = True) -> Table:
    """Per-task rows (n, passes, mean reward, statuses, pass@k, pass^k) and an overall row."""
    table = Table(title="rollouts", show_lines=False)
    for col in ("task", "n", "pass", "mean reward", *STATUSES):
        table.add_column(col, justify="left" if col == "task" else "right")
    for k in ks:
        table.add_column(f"pass@{k}", justify="right")
        table.add_column(f"pass^{k}", justify="right")

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    if per_task:
        for st in summary.tasks:
            row = [st.task_id, str(st.n), str(st.passed), fmt(st.mean_reward)]
            row += [str(st.statuses.get(s, 0)) for s in STATUSES]
            for k in ks:
                row += [fmt(st.pass_at.get(k)), fmt(st.pass_hat.get(k))]
            table.add_row(*row)
    n = sum(st.n for st in summary.tasks)
    passed = sum(st.passed for st in summary.tasks)
    row = ["[bold]overall[/]", str(n), str(passed), fmt(summary.mean_reward)]
    row += [str(summary.statuses.get(s, 0)) for s in STATUSES]
    for k in ks:
        row += [fmt(summary.pass_at.get(k)), fmt(summary.pass_hat.get(k))]
    table.add_row(*row, end_section=True)
    return table


def flagged_line(summary: RunSummary) -> str:
    """How many rollouts the reward-hack monitor flagged, and by which rules."""
    rules = ", ".join(f"{rule} {n}" for rule, n in summary.flagged_rules.items())
    return f"reward-hack monitor: {summary.flagged} of {summary.total} rollouts flagged" + (
        f" ({rules}; see openforge traces show ROLLOUT_ID --store STORE)" if rules else ""
    )


def print_summary(console: Console, summary: RunSummary, ks: list[int]) -> None:
    """Print the summary table and the monitor's line."""
    console.print(summary_table(summary, ks, per_task=len(summary.tasks) <= 200))
    console.print(flagged_line(summary), markup=False)
