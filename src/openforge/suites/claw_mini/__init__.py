"""claw-mini: 45 one-command shell file tasks in OpenForge's native format, shipped as data.

Its test tasks hold out whole skills (commands no train task uses); ``tasks/`` holds one
native task directory each.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from openforge.suites.suite import Suite

__all__ = ["SUITE"]


def _tasks() -> Path:
    return Path(str(resources.files(__name__) / "tasks"))


SUITE = Suite(name="claw-mini", formats=("native",), bundled=_tasks)
