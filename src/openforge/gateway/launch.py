"""Turning CLI options into an engine and a model directory, with errors that name the option."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from openforge.engines.base import Engine, TextEngine

__all__ = ["build_engine", "resolve_model_dir"]

Fail = Callable[[str], Any]


def _die(fail: Fail, message: str) -> NoReturn:
    fail(message)
    raise SystemExit(2)  # fail() normally exits; this keeps the type checker honest


def resolve_model_dir(model: str, fail: Fail) -> str:
    """``--model``: a known name (``smollm2-135m``), a HF directory or a GGUF file."""
    try:
        from openforge.models.registry import resolve_model
    except ImportError:
        path = Path(model)
        if not path.exists():
            _die(fail, f"--model {model}: no such directory")
        return str(path)
    try:
        return str(resolve_model(model))
    except Exception as exc:
        _die(fail, f"--model {model}: {exc}")


def build_engine(
    kind: str,
    model_dir: str,
    script: Path | None,
    urls: list[str],
    api: str | None,
    max_context: int | None,
    fail: Fail,
    served_model: str = "",
) -> Engine | TextEngine:
    """The engine ``--engine`` names, configured from the other options.

    ``upstream`` (a teacher API) is a text engine: ``--model`` still names the model whose
    tokenizer renders the recorded prompt and reply ids; the upstream is asked for
    ``served_model``, or else the model name each harness request carries.
    """
    if kind == "scripted":
        from openforge.engines.scripted import ScriptedEngine, ScriptError

        if script is None:
            _die(fail, "--engine scripted needs --script FILE (JSONL replies)")
        try:
            return ScriptedEngine.for_model(script, model_dir, max_context=max_context)
        except ScriptError as exc:
            _die(fail, f"--script: {exc}")
    try:
        from openforge.engines.registry import create_engine
    except ImportError:
        _die(fail, f"--engine {kind} is not available in this build (no engines.registry)")
    if kind == "upstream" and not urls:
        _die(fail, "--engine upstream needs --url BASE_URL (e.g. https://api.openai.com/v1)")
    # The upstream must not be asked for our tokenizer's directory as its model name.
    model = "" if kind == "upstream" else model_dir
    try:
        return create_engine(
            kind,
            model=model,
            urls=urls,
            api=api,
            max_context=max_context,
            served_model=served_model,
        )
    except Exception as exc:
        _die(fail, f"--engine {kind}: {exc}")
