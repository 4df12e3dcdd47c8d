"""claw-drill: held-out instances of one-command shell file skills, generated from seeds
(``generate.py``) into native task directories on first use."""

from __future__ import annotations

from openforge.suites.drills.generate import DRILL_SUITE, drill_suite
from openforge.suites.suite import Suite

__all__ = ["SUITE"]

SUITE = Suite(name=DRILL_SUITE, formats=("native",), bundled=drill_suite)
