"""Render a model's Jinja chat template the way Hugging Face does, without transformers.

HF compiles templates in an immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``
and a ``raise_exception`` global; templates written for it rely on exactly that.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from jinja2 import Template
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["render_chat_template"]


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    # HF's tojson keeps non-ASCII characters as they are (Jinja's default escapes them).
    return json.dumps(value, ensure_ascii=False, indent=indent)


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def render_chat_template(
    source: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool = False,
    **variables: Any,
) -> str:
    """Render ``messages`` through the template ``source`` (raises jinja2's TemplateError)."""
    return _compile(source).render(
        messages=messages, add_generation_prompt=add_generation_prompt, **variables
    )
