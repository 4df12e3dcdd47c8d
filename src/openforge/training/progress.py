"""``openforge train``'s progress bar (rich): GRPO step, last train reward, last held-out
reward, elapsed time and ETA. It listens to the run's metrics records
(:attr:`MetricsWriter.listeners <openforge.training.metrics.MetricsWriter.listeners>`),
so the loop itself knows nothing about a terminal."""

from __future__ import annotations

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
        self.bar = self.progress.add_task("train", total=steps, completed=done, status="")
        self._show()

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
            self.progress.update(self.bar, completed=int(record.get("step", 0)) + 1)
        elif kind == "eval":
            self.held_out = f"{float(record.get('reward_mean', 0.0)):.2f} ({record.get('tag')})"
            self.phase = f"evaluated {record.get('tag')}"
        elif kind == "sft":
            self.phase = f"SFT update {int(record.get('step', 0)) + 1}"
        self._show()

    def __enter__(self) -> TrainProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
