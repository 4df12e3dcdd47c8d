"""OSWorld's example format (``loader.py``), scored in the sandbox by ``evaluate.py``, OSWorld's
getters and metrics for files and command output."""

from __future__ import annotations

from openforge.suites.osworld.loader import is_osworld_suite, load_osworld
from openforge.suites.suite import Checkout, Suite

__all__ = ["SUITE"]

SUITE = Suite(
    name="osworld",
    formats=("osworld",),
    checkout=Checkout(load=load_osworld, recognise=is_osworld_suite),
)
