"""Rendering: conversations to prompt token ids, and engine output ids back to messages.

Typical gateway use::

    renderer = load_renderer(model_dir)          # cached per directory
    history = renderer.new_history()             # one per rollout, kept in memory
    prompt = renderer.render(conversation, history)
    ... engine samples output_ids from prompt.ids ...
    parsed = renderer.parse(output_ids, id_factory)   # or renderer.stream_parser(id_factory)
    history.record(prompt, output_ids, assistant_message)
"""

from __future__ import annotations

import functools
from pathlib import Path

from openforge.rendering.history import DriftPoint, RenderedPrompt, RolloutHistory
from openforge.rendering.parsing import IdFactory, ParsedOutput, StreamParser
from openforge.rendering.renderer import Renderer, RenderError
from openforge.rendering.tokenizer import Tokenizer, TokenizerError, load_tokenizer

__all__ = [
    "DriftPoint",
    "IdFactory",
    "ParsedOutput",
    "RenderError",
    "RenderedPrompt",
    "Renderer",
    "RolloutHistory",
    "StreamParser",
    "Tokenizer",
    "TokenizerError",
    "load_renderer",
    "load_tokenizer",
]


@functools.lru_cache(maxsize=16)
def load_renderer(model_dir: str | Path) -> Renderer:
    """The renderer for a model directory (cached per path)."""
    return Renderer(load_tokenizer(model_dir))
