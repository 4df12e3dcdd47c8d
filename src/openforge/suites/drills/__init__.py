"""claw-drill: held-out instances of one-command shell file skills, generated from seeds
(``generate.py``) into native task directories on first use."""

from __future__ import annotations

from openforge.suites.drills.generate import (
    DRILL_LEVELS_SUITE,
    DRILL_SUITE,
    drill_levels_suite,
    drill_suite,
)
from openforge.suites.suite import Suite

__all__ = ["LEVELS_SUITE", "SUITE"]

SUITE = Suite(name=DRILL_SUITE, formats=("native",), bundled=drill_suite)
# The same skills at three difficulties (the curriculum's suite, training/curriculum.py).
LEVELS_SUITE = Suite(name=DRILL_LEVELS_SUITE, formats=("native",), bundled=drill_levels_suite)
