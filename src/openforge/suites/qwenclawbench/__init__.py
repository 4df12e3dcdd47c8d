"""QwenClawBench (and PinchBench): tasks read from the user's checkout (``loader.py``), graded
by its own code in a child process (``grade_child.py``), reported as its ``benchmark.py``
does (``metrics.py``)."""

from __future__ import annotations

from openforge.suites.qwenclawbench.legacy import load_qwenclawbench
from openforge.suites.qwenclawbench.loader import find_checkout, load_qwenclawbench_checkout
from openforge.suites.qwenclawbench.metrics import score_metrics
from openforge.suites.suite import Checkout, Metrics, Suite, TaskFiles, found_by

__all__ = ["SUITE"]

SUITE = Suite(
    name="qwenclawbench",
    formats=("qwenclawbench",),
    checkout=Checkout(load=load_qwenclawbench_checkout, recognise=found_by(find_checkout)),
    # PinchBench-style task files anywhere under the path given.
    task_files=TaskFiles(glob="task_*.md", load=load_qwenclawbench),
    metrics=Metrics(score_metrics),
)
