"""What the live progress shows of rollouts, and the end-of-run summary table (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from openforge.progress import LiveCounts, live_display
from openforge.rollouts.config import STATUSES, RolloutResult
from openforge.rollouts.metrics import RunSummary

__all__ = ["RolloutCounts", "flagged_line", "live_display", "print_summary", "summary_table"]

_STYLE = {"completed": "green", "agent_error": "yellow", "timeout": "magenta", "infra_error": "red"}


class RolloutCounts(LiveCounts):
    """:class:`LiveCounts` of rollouts: per status, and timeouts on an overloaded host."""

    def __init__(self, total: int, skipped: int, threshold: float = 1.0) -> None:
        super().__init__(total, skipped, threshold, noun="rollouts", statuses=STATUSES)

    def finished(self, res: RolloutResult) -> None:
        """A rollout ended."""
        self.running -= 1
        scored = res.reward if res.status != "infra_error" else None
        if res.status == "timeout" and res.host.get("overloaded"):
            self.overloaded += 1
        self.record(res.status, scored)


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
