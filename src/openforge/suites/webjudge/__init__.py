"""Live-site suites judged by WebJudge (``grader.py``): WebVoyager and Online-Mind2Web, read
from the suite's own task file (``loader.py``)."""

from __future__ import annotations

from openforge.suites.suite import Checkout, Suite
from openforge.suites.webjudge.loader import load_mind2web, load_webvoyager

__all__ = ["MIND2WEB", "WEBVOYAGER"]

WEBVOYAGER = Suite(name="webvoyager", formats=("webjudge",), checkout=Checkout(load_webvoyager))
MIND2WEB = Suite(name="online-mind2web", formats=("webjudge",), checkout=Checkout(load_mind2web))
