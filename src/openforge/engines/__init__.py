"""Engines: token ids in, token ids and logprobs out."""

from openforge.engines.base import (
    Engine,
    EngineError,
    EngineInfo,
    EngineOverloaded,
    EngineRequest,
    TextEngine,
    TokenChunk,
    UpdatableEngine,
)

__all__ = [
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineOverloaded",
    "EngineRequest",
    "TextEngine",
    "TokenChunk",
    "UpdatableEngine",
]
