"""``openforge train``'s progress where its output is a log, not a terminal: plain lines,
as ``openforge rollout`` prints them, instead of a bar that would print nothing."""

from __future__ import annotations

import io

from rich.console import Console

from openforge.training.progress import TrainProgress


def test_a_log_gets_plain_lines_with_step_rewards_and_eta() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with TrainProgress(3, console, done=1) as bar:
        assert out.getvalue().splitlines()[-1].startswith("GRPO step 1/3, reward -")
        bar.record({"kind": "train", "step": 1, "reward_mean": 0.25})
        bar.record({"kind": "eval", "tag": "step-2", "reward_mean": 0.5})
        bar.record({"kind": "skip", "step": 2, "reason": "no signal"})
    first, *_, last = out.getvalue().splitlines()
    assert "ETA -" in first  # no step ran yet in this process: no rate to tell
    assert last.startswith("GRPO step 3/3, reward 0.25, held-out 0.50 (step-2), skipped (no")
    assert "ETA 0:00" in last and "\x1b[" not in out.getvalue()  # no bar, no escape codes


def test_a_terminal_gets_the_bar_not_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with TrainProgress(2, console) as bar:
        assert bar.lines is None
        bar.record({"kind": "train", "step": 0, "reward_mean": 1.0})
    assert "GRPO step" in out.getvalue() and "GRPO step 1/2," not in out.getvalue()
