"""95% confidence intervals for the benches' repeated measurements (seeds, paired runs)."""

from __future__ import annotations

from openforge.training.reach import ci95 as _ci95


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of a 95% t-interval (``training/reach.py``'s, exact t quantile)."""
    interval = _ci95(values)
    return interval.mean, interval.half
