"""``openforge train``'s progress: GRPO step, last train reward, last held-out reward,
elapsed time and ETA; a rich bar on a terminal, else (a log) one plain line every
``$OPENFORGE_PROGRESS_INTERVAL_S`` seconds (30 by default) and one when it ends, as
``openforge rollout`` prints. It listens to the run's metrics records
(:attr:`MetricsWriter.listeners <openforge.training.metrics.MetricsWriter.listeners>`),
so the loop itself knows nothing about a terminal."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from openforge.progress import PeriodicLines, clock, interval_s

__all__ = ["TrainProgress"]


class TrainProgress:
    """A rich progress bar over ``steps`` GRPO steps; call :meth:`record` with each metrics
    record (``train``, ``skip``, ``eval``, ``sft``)."""

    def __init__(self, steps: int, console: Console | None = None, done: int = 0) -> None:
        # The status goes last: on a narrow console rich cuts the end of the line, and the
        # step count and ETA matter most.
        self.progress = Progress(
            TextColumn("[bold]GRPO step"),
            MofNCompleteColumn(),
            BarColumn(bar_width=20),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=console,
            transient=False,
            # Steps take minutes: rich's default 30 s window would hold no step, and no ETA.
            speed_estimate_period=24 * 3600,
        )
        self.reward = "-"
        self.held_out = "-"
        self.phase = "starting"
        self.steps, self.done, self.first = steps, done, done
        self.t0 = time.monotonic()
        self.bar = self.progress.add_task("train", total=steps, completed=done, status="")
        self.lines = (
            None
            if self.progress.console.is_terminal
            else PeriodicLines(self.line, self.progress.console, interval_s())
        )
        self._show()

    def line(self) -> str:
        """One plain line for a log: step, rewards, phase, elapsed time and ETA."""
        elapsed = time.monotonic() - self.t0
        ran = self.done - self.first  # steps run by this process (not a resumed run's)
        eta = (self.steps - self.done) * elapsed / ran if ran > 0 else None
        return (
            f"GRPO step {self.done}/{self.steps}, reward {self.reward}, held-out "
            f"{self.held_out}, {self.phase}, elapsed {clock(elapsed)}, ETA {clock(eta)}"
        )

    def _show(self) -> None:
        status = f"reward {self.reward} · held-out {self.held_out} · {self.phase}"
        self.progress.update(self.bar, status=status)

    def record(self, record: dict[str, Any]) -> None:
        """Advance on a step's record; note evaluations and SFT updates."""
        kind = record.get("kind")
        if kind in ("train", "skip"):
            if isinstance(record.get("reward_mean"), int | float):
                self.reward = f"{float(record['reward_mean']):.2f}"
            self.phase = "updated" if kind == "train" else f"skipped ({record.get('reason')})"
            self.done = int(record.get("step", 0)) + 1
            self.progress.update(self.bar, completed=self.done)
        elif kind == "eval":
            self.held_out = f"{float(record.get('reward_mean', 0.0)):.2f} ({record.get('tag')})"
            self.phase = f"evaluated {record.get('tag')}"
        elif kind == "sft":
            self.phase = f"SFT update {int(record.get('step', 0)) + 1}"
        self._show()

    def __enter__(self) -> TrainProgress:
        if self.lines is None:
            self.progress.start()
        else:
            self.lines.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.lines is None:
            self.progress.stop()
            return
        self.lines.__exit__(*exc)
        self.lines.print_line()
