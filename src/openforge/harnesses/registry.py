"""Harness adapters by name: ``get_harness("shell", command="…")``.

Adapters register lazily as ``"module:factory"`` so naming one does not import the others;
add a line to :data:`HARNESSES` or call :func:`register_harness` at runtime.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from openforge.harnesses.base import Harness, HarnessError
from openforge.tasks.transcript import Transcript

__all__ = [
    "HARNESSES", "decode_transcript", "get_harness", "harness_factory", "harness_names",
    "register_harness", "required_options",
]  # fmt: skip

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


def harness_factory(name: str) -> HarnessFactory:
    """The callable that builds harness ``name`` (imported on first use)."""
    entry = HARNESSES.get(name)
    if entry is None:
        raise HarnessError(f"unknown harness {name!r}; known: {', '.join(harness_names())}")
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        assert callable(entry)
    return entry


def _parameters(factory: HarnessFactory) -> list[inspect.Parameter] | None:
    """The factory's keyword parameters, or None when it takes ``**kwargs`` or hides them."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p for p in params if p.kind is not inspect.Parameter.VAR_POSITIONAL]


def decode_transcript(name: str, raw: Any) -> Transcript:
    """A transcript harness ``name`` wrote (as a run directory keeps it) decoded by its
    adapter, without configuring one; :class:`HarnessError` when no adapter can."""
    decode = getattr(harness_factory(name), "decode", None)
    if not callable(decode):
        raise HarnessError(f"harness {name!r} cannot decode a transcript without an instance")
    transcript = decode(raw)
    assert isinstance(transcript, Transcript)
    return transcript


def required_options(name: str) -> list[str]:
    """The options harness ``name`` cannot be built without (``shell``: ``command``)."""
    params = _parameters(harness_factory(name)) or []
    return [p.name for p in params if p.default is inspect.Parameter.empty]


def get_harness(name: str, **options: Any) -> Harness:
    """A configured adapter for harness ``name``; :class:`HarnessError` says what went wrong."""
    factory = harness_factory(name)
    params = _parameters(factory)
    if params is not None:
        known = [p.name for p in params]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise HarnessError(
                f"harness {name!r} has no option {', '.join(unknown)}; "
                f"its options: {', '.join(known) or 'none'}"
            )
        missing = [k for k in required_options(name) if k not in options]
        if missing:
            raise HarnessError(f"harness {name!r} needs the option {', '.join(missing)}")
    try:
        harness: Harness = factory(**options)
    except TypeError as exc:
        raise HarnessError(f"harness {name!r}: bad options {sorted(options)}: {exc}") from exc
    return harness
