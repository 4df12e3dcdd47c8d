"""Building an engine from configuration (``openforge gateway --engine …``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openforge.engines.base import Engine, EngineError, TextEngine

__all__ = ["ENGINE_KINDS", "EngineConfig", "create_engine"]

ENGINE_KINDS = ("local", "vllm", "sglang", "scripted", "upstream")


@dataclass(slots=True)
class EngineConfig:
    """What ``--engine`` and its options say.

    ``model``: a model name or directory (local, scripted; for vllm/sglang it gives the
    context length and, via ``served_model``, the name the server knows the model by).
    ``urls``: replica base URLs (vllm, sglang) or the API base URL (upstream).
    ``api``: "openai" or "anthropic" (upstream). ``max_context``: a cap on prompt + output.
    """

    kind: str
    model: str = ""
    script: str | None = None
    urls: list[str] = field(default_factory=list)
    api: str | None = None
    max_context: int | None = None
    served_model: str = ""
    api_key: str | None = None
    device: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            choices = ", ".join(ENGINE_KINDS)
            raise EngineError(f"unknown engine {self.kind!r}; choose one of {choices}")
        if self.kind in ("vllm", "sglang") and not self.urls:
            raise EngineError(f"--engine {self.kind} needs --url URL (one per replica)")
        if self.kind == "scripted" and not self.script:
            raise EngineError("--engine scripted needs --script FILE")
        if self.kind == "upstream" and self.api not in ("openai", "anthropic"):
            raise EngineError("--engine upstream needs --api openai or --api anthropic")
        if self.kind == "local" and not self.model:
            raise EngineError("--engine local needs --model NAME_OR_PATH")


def create_engine(config: EngineConfig | str, **options: Any) -> Engine | TextEngine:
    """The engine ``config`` describes; ``create_engine("vllm", urls=[...])`` also works."""
    if isinstance(config, str):
        config = EngineConfig(kind=config, **options)
    if config.kind == "local":
        from openforge.engines.local import LocalEngine

        return LocalEngine(
            config.model,
            device=config.device,
            threads=config.threads,
            max_context=config.max_context,
        )
    if config.kind == "scripted":
        from openforge.engines.scripted import ScriptedEngine

        assert config.script is not None
        return ScriptedEngine.for_model(
            Path(config.script), config.model, max_context=config.max_context
        )
    if config.kind == "upstream":
        from openforge.engines.upstream import UpstreamEngine

        return UpstreamEngine(
            config.api,  # type: ignore[arg-type]  # checked in __post_init__
            url=config.urls[0] if config.urls else None,
            api_key=config.api_key,
            model=config.served_model or config.model,
            context_length=config.max_context or 200_000,
        )
    return _remote(config)


def _remote(config: EngineConfig) -> Engine:
    from openforge.engines.remote import RemoteEngine, default_client
    from openforge.engines.replicas import ReplicaSet
    from openforge.engines.sglang import SGLangEngine
    from openforge.engines.vllm import VLLMEngine

    cls: type[RemoteEngine] = VLLMEngine if config.kind == "vllm" else SGLangEngine
    context = config.max_context or _model_context(config.model) or 8192
    if len(config.urls) == 1:
        return cls(
            config.urls[0],
            model=config.served_model,
            context_length=context,
            api_key=config.api_key,
        )
    client = default_client()
    engines: list[RemoteEngine] = [
        cls(
            url,
            model=config.served_model,
            context_length=context,
            client=client,
            api_key=config.api_key,
        )
        for url in config.urls
    ]
    return ReplicaSet(engines, client=client)


def _model_context(model: str) -> int | None:
    """``max_position_embeddings`` of a local HF directory, when there is one."""
    path = Path(model) / "config.json" if model else None
    if path is None or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None
