"""Live progress of a long command (rollouts, task checks) and the host it runs on.

On a terminal the display redraws in place; in a log (not a terminal) it is one line every
``interval_s`` seconds and one when the last item ends: done/total, pass rate so far,
elapsed time and the time left at the rate so far. It knows no package of OpenForge, so
every command can show it (rollouts/progress.py adds what is particular to rollouts).
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

__all__ = [
    "LiveCounts", "PeriodicLines", "ProgressLines", "clock", "concurrency_warning", "cores",
    "interval_s", "live_display", "load1",
]  # fmt: skip

# Seconds between progress lines in a log (not a terminal).
INTERVAL_ENV = "OPENFORGE_PROGRESS_INTERVAL_S"


def clock(seconds: float | None) -> str:
    """``h:mm:ss`` (or ``m:ss``); ``-`` for an unknown time."""
    if seconds is None:
        return "-"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class LiveCounts:
    """Counts per status, running items, pass rate, mean reward, elapsed time and ETA,
    rendered as one renderable (a terminal) or one plain line (a log)."""

    def __init__(
        self,
        total: int,
        skipped: int,
        threshold: float = 1.0,
        noun: str = "rollouts",
        statuses: tuple[str, ...] = (),
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
        order = [*self.statuses, *sorted(set(self.counts) - set(self.statuses))]
        parts += [f"{s} {self.counts[s]}" for s in order if self.counts.get(s)]
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


class PeriodicLines:
    """Prints ``line()`` on entering and every ``interval_s`` seconds (from a thread, so a
    long step or rollout does not silence it): the progress of a command whose output is a
    log, not a terminal."""

    def __init__(self, line: Callable[[], str], console: Console, interval_s: float = 30.0) -> None:
        self.line, self.console, self.interval_s = line, console, interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="progress-lines", daemon=True)

    def print_line(self) -> None:
        """Print the line now."""
        with self._lock:
            self.console.print(self.line(), markup=False, highlight=False)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.print_line()

    def __enter__(self) -> PeriodicLines:
        self.print_line()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class ProgressLines(PeriodicLines):
    """Prints :meth:`LiveCounts.line` every ``interval_s`` seconds and when the last rollout
    ends."""

    def __init__(self, live: LiveCounts, console: Console, interval_s: float = 30.0) -> None:
        super().__init__(live.line, console, interval_s)
        self.live = live
        live.listeners.append(self._on_finish)

    def _on_finish(self) -> None:
        if self.live.skipped + self.live.done >= self.live.total:
            self.print_line()


def interval_s() -> float:
    """Seconds between progress lines in a log: ``$OPENFORGE_PROGRESS_INTERVAL_S`` (at least
    1), 30 by default."""
    try:
        interval = float(os.environ.get(INTERVAL_ENV) or 30.0)
    except ValueError:
        interval = 30.0
    return max(interval, 1.0)


@contextlib.contextmanager
def live_display(live: LiveCounts, console: Console) -> Iterator[None]:
    """Show ``live`` while inside: redrawn in place on a terminal, else as periodic lines
    (every ``$OPENFORGE_PROGRESS_INTERVAL_S`` seconds, 30 by default)."""
    from rich.live import Live

    if console.is_terminal:
        with Live(live, console=console, refresh_per_second=4):
            yield
        return
    with ProgressLines(live, console, interval_s()):
        yield


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load1() -> float:
    """The one-minute load average (0.0 where the system does not say)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return 0.0


def concurrency_warning(concurrency: int, n_cores: int, flag: str = "--concurrency") -> str | None:
    """A warning when ``concurrency`` rollouts at once exceed what ``n_cores`` cores run
    without making each other slow; None when they fit."""
    if concurrency <= n_cores:
        return None
    return (
        f"{flag} {concurrency} exceeds this machine's {n_cores} cores: rollouts (and a local "
        f"engine) share them, run slower and may hit their task timeouts, which score as "
        f"timeouts; {flag} {n_cores} fits"
    )
