"""The live progress display and the end-of-run summary table (rich).

On a terminal the display redraws in place; in a log (not a terminal) it is one line every
``interval_s`` seconds and one when the last rollout ends: done/total, pass rate so far,
elapsed time and the time left at the rate so far.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from openforge.rollouts.config import STATUSES, RolloutResult
from openforge.rollouts.metrics import RunSummary

__all__ = [
    "LiveCounts", "ProgressLines", "clock", "flagged_line", "live_display", "summary_table",
]  # fmt: skip

# Seconds between progress lines in a log (not a terminal).
INTERVAL_ENV = "OPENFORGE_PROGRESS_INTERVAL_S"

_STYLE = {"completed": "green", "agent_error": "yellow", "timeout": "magenta", "infra_error": "red"}


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (or ``m:ss``); ``-`` for an unknown time."""
    if seconds is None:
        return "-"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class LiveCounts:
    """Counts per status, running rollouts, pass rate, mean reward, elapsed time and ETA,
    rendered as one renderable (a terminal) or one plain line (a log)."""

    def __init__(
        self,
        total: int,
        skipped: int,
        threshold: float = 1.0,
        noun: str = "rollouts",
        statuses: tuple[str, ...] = STATUSES,
    ) -> None:
        self.noun, self.statuses = noun, statuses
        self.counts: Counter[str] = Counter()
        self.running = 0
        self.rewards: list[float] = []
        self.passed = 0
        self.overloaded = 0  # timeouts while the host was overloaded (rollouts/host.py)
        self.total = total
        self.skipped = min(skipped, total)
        self.threshold = threshold
        self.t0 = time.monotonic()
        self.listeners: list[Callable[[], None]] = []
        self.progress = Progress(
            TextColumn(noun), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        self.bar = self.progress.add_task(noun, total=total)
        self.progress.advance(self.bar, self.skipped)

    def started(self, task_id: str, sample: int) -> None:
        """A rollout took a concurrency slot."""
        self.running += 1

    def finished(self, res: RolloutResult) -> None:
        """A rollout ended."""
        self.running -= 1
        scored = res.reward if res.status != "infra_error" else None
        if res.status == "timeout" and res.host.get("overloaded"):
            self.overloaded += 1
        self.record(res.status, scored)

    def record(self, status: str, reward: float | None) -> None:
        """One item ended as ``status`` with ``reward`` (None: not scored)."""
        self.counts[status] += 1
        if reward is not None:
            self.rewards.append(reward)
            self.passed += reward >= self.threshold
        self.progress.advance(self.bar)
        for listener in self.listeners:
            listener()

    @property
    def done(self) -> int:
        """Rollouts ended in this run (not those a resumed run skipped)."""
        return sum(self.counts.values())

    def eta_s(self) -> float | None:
        """Seconds left at this run's rate so far; None before the first rollout ends."""
        if not self.done:
            return None
        left = self.total - self.skipped - self.done
        return left * (time.monotonic() - self.t0) / self.done

    def _parts(self) -> list[str]:
        scored = len(self.rewards)
        rate = f"{self.passed / scored:.0%} ({self.passed}/{scored})" if scored else "-"
        mean = f"{sum(self.rewards) / scored:.3f}" if scored else "-"
        parts = [f"pass rate {rate}", f"mean reward {mean}", f"running {self.running}"]
        parts += [f"{s} {self.counts[s]}" for s in self.statuses if self.counts.get(s)]
        if self.overloaded:
            parts.append(f"timeouts on an overloaded host {self.overloaded}")
        if self.skipped:
            parts.append(f"skipped (done before) {self.skipped}")
        return parts

    def line(self) -> str:
        """One plain line for a log."""
        elapsed = time.monotonic() - self.t0
        head = f"{self.noun} {self.skipped + self.done}/{self.total}"
        tail = f"elapsed {clock(elapsed)}, ETA {clock(self.eta_s())}"
        return ", ".join([head, *self._parts(), tail])

    def __rich__(self) -> Group:
        return Group(self.progress, "  ".join([*self._parts(), f"ETA {clock(self.eta_s())}"]))


class ProgressLines:
    """Prints :meth:`LiveCounts.line` every ``interval_s`` seconds (from a thread, so a
    long rollout does not silence it) and when the last rollout ends."""

    def __init__(self, live: LiveCounts, console: Console, interval_s: float = 30.0) -> None:
        self.live, self.console, self.interval_s = live, console, interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="progress-lines", daemon=True)
        self._last_done = -1
        live.listeners.append(self._on_finish)

    def _print(self) -> None:
        with self._lock:
            self.console.print(self.live.line(), markup=False, highlight=False)
            self._last_done = self.live.done

    def _on_finish(self) -> None:
        if self.live.skipped + self.live.done >= self.live.total:
            self._print()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._print()

    def __enter__(self) -> ProgressLines:
        self.console.print(self.live.line(), markup=False, highlight=False)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextlib.contextmanager
def live_display(live: LiveCounts, console: Console) -> Iterator[None]:
    """Show ``live`` while inside: redrawn in place on a terminal, else as periodic lines
    (every ``$OPENFORGE_PROGRESS_INTERVAL_S`` seconds, 30 by default)."""
    from rich.live import Live

    if console.is_terminal:
        with Live(live, console=console, refresh_per_second=4):
            yield
        return
    try:
        interval = float(os.environ.get(INTERVAL_ENV) or 30.0)
    except ValueError:
        interval = 30.0
    with ProgressLines(live, console, max(interval, 1.0)):
        yield


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
