"""Harness adapters by name: ``get_harness("shell", command="…")``.

Adapters register lazily as ``"module:factory"`` so naming one does not import the others;
add a line to :data:`HARNESSES` or call :func:`register_harness` at runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from openforge.harnesses.base import Harness, HarnessError

__all__ = ["HARNESSES", "get_harness", "harness_names", "register_harness"]

HarnessFactory = Callable[..., Harness]

HARNESSES: dict[str, str | HarnessFactory] = {
    "shell": "openforge.harnesses.shell:ShellHarness",
    "claw": "openforge.harnesses.claw:ClawHarness",
    "claude-code": "openforge.harnesses.claude_code:ClaudeCodeHarness",
    "codex": "openforge.harnesses.codex:CodexHarness",
    "openclaw": "openforge.harnesses.openclaw:OpenClawHarness",
    "mini-swe-agent": "openforge.harnesses.mini_swe_agent:MiniSweAgentHarness",
    "browser-agent": "openforge.harnesses.browser:BrowserAgentHarness",
    "browser-use": "openforge.harnesses.browser_use:BrowserUseHarness",
    "computer-agent": "openforge.harnesses.computer:ComputerAgentHarness",
}


def register_harness(name: str, factory: str | HarnessFactory) -> None:
    """Make ``name`` resolvable; ``factory`` is a callable or ``"module:attribute"``."""
    HARNESSES[name] = factory


def harness_names() -> list[str]:
    """Every registered harness name."""
    return sorted(HARNESSES)


def get_harness(name: str, **options: Any) -> Harness:
    """A configured adapter for harness ``name``; :class:`HarnessError` says what went wrong."""
    entry = HARNESSES.get(name)
    if entry is None:
        raise HarnessError(f"unknown harness {name!r}; known: {', '.join(harness_names())}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        assert callable(entry)
    try:
        harness: Harness = entry(**options)
    except TypeError as exc:
        raise HarnessError(f"harness {name!r}: bad options {sorted(options)}: {exc}") from exc
    return harness
