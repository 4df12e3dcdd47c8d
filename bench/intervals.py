"""95% confidence intervals for the benches' repeated measurements (seeds, paired runs)."""

from __future__ import annotations

import math
import statistics


def ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of a 95% t-interval."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    df = len(values) - 1
    t = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36}.get(df)
    if t is None:  # Cornish-Fisher expansion of the t quantile: within 0.006 from df = 8
        z = 1.959964
        t = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
    return mean, t * statistics.stdev(values) / math.sqrt(len(values))
