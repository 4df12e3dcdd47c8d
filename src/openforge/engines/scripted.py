"""The scripted engine: replies from a JSONL file, as real token ids, with no forward pass.

Each line of the script is one reply::

    {"text": "…"?, "reasoning": "…"?, "tool_calls": [{"name": "…", "arguments": {…}}]?,
     "token_delay_s": 0.1?}

The k-th call of a rollout (counted by ``EngineRequest.rollout_id``; calls without one
share one anonymous counter) gets line k; past the end the last line repeats. Each
reply is rendered once through the model's real tokenizer and tool-call template into
output ids (ending with the end-of-turn token), so the gateway parses, serves and
records it exactly as it would a sampled answer. ``token_delay_s`` streams that reply one
token per so many seconds (a slow call, for tests of what happens while calls run).

Logprobs are deterministic stand-ins, not model probabilities: the logprob of the token
at position ``i`` with id ``t`` is ``-((t * 7919 + i * 104729) % 2000) / 1000`` — a value
in ``(-2, 0]`` that varies like a real one and is the same on every run, so tests can
recompute it with :func:`scripted_logprob`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from openforge.engines.base import EngineError, EngineInfo, EngineRequest, TokenChunk

__all__ = [
    "ScriptError",
    "ScriptedEngine",
    "ScriptedReply",
    "load_script",
    "scripted_logprob",
]

_NO_LIMIT = 1 << 30  # "no context limit": larger than any prompt a harness sends


class ScriptError(ValueError):
    """A script file that cannot be read; the message names the file, line and field."""


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    text: str = ""
    reasoning: str | None = None
    # (name, arguments) pairs; arguments is the JSON object the tool is called with.
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = field(default_factory=tuple)
    token_delay_s: float = 0.0


def scripted_logprob(token_id: int, position: int) -> float:
    """The deterministic logprob the scripted engine reports for ``token_id`` at ``position``."""
    return -((token_id * 7919 + position * 104729) % 2000) / 1000.0


def _parse_line(raw: bytes, where: str) -> ScriptedReply:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ScriptError(f"{where}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ScriptError(f"{where}: a reply must be a JSON object")
    unknown = set(obj) - {"text", "reasoning", "tool_calls", "token_delay_s"}
    if unknown:
        raise ScriptError(f"{where}: unknown field(s) {sorted(unknown)}")
    text = obj.get("text") or ""
    if not isinstance(text, str):
        raise ScriptError(f"{where}: field 'text' must be a string")
    reasoning = obj.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ScriptError(f"{where}: field 'reasoning' must be a string")
    calls_raw = obj.get("tool_calls") or []
    if not isinstance(calls_raw, list):
        raise ScriptError(f"{where}: field 'tool_calls' must be a list")
    calls: list[tuple[str, dict[str, Any]]] = []
    for i, call in enumerate(calls_raw):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ScriptError(f"{where}: field 'tool_calls[{i}].name' must be a string")
        args = call.get("arguments", {})
        if not isinstance(args, dict):
            raise ScriptError(f"{where}: field 'tool_calls[{i}].arguments' must be an object")
        calls.append((call["name"], args))
    if not text and reasoning is None and not calls:
        raise ScriptError(f"{where}: a reply needs 'text', 'reasoning' or 'tool_calls'")
    delay = obj.get("token_delay_s", 0.0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= 60:
        raise ScriptError(f"{where}: field 'token_delay_s' must be a number of seconds (0-60)")
    return ScriptedReply(
        text=text, reasoning=reasoning, tool_calls=tuple(calls), token_delay_s=float(delay)
    )


def load_script(path: str | Path) -> list[ScriptedReply]:
    """Read a JSONL script; blank lines are skipped. Raises :class:`ScriptError`."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ScriptError(f"{p}: cannot read script: {exc.strerror}") from None
    replies = [
        _parse_line(line, f"{p}:{n}")
        for n, line in enumerate(data.splitlines(), start=1)
        if line.strip()
    ]
    if not replies:
        raise ScriptError(f"{p}: the script has no replies")
    return replies


class ScriptedEngine:
    """An :class:`~openforge.engines.base.Engine` that plays a script, token by token.

    ``encode`` turns a reply into the output ids a model would sample for it (normally
    ``rendering.encode_reply`` with the model's tokenizer; see :meth:`for_model`).
    ``max_tokens`` cuts a reply short with finish "length", as a real engine would.
    """

    def __init__(
        self,
        replies: list[ScriptedReply],
        encode: Callable[[ScriptedReply], list[int]],
        model: str = "scripted",
        max_context: int | None = None,
        delay_s: float = 0.0,
    ) -> None:
        if not replies:
            raise ScriptError("a script needs at least one reply")
        self._encoded = [encode(r) for r in replies]  # rendered once, served many times
        self._delays = [r.token_delay_s for r in replies]
        self._model = model
        self._max_context = max_context
        self._delay_s = delay_s  # pause between tokens, for tests that race a stream
        self._counters: dict[str | None, int] = {}
        self._weight_version = "0"

    @classmethod
    def for_model(
        cls,
        script: str | Path,
        model: str | Path,
        max_context: int | None = None,
        *,
        tool_format: str | None = None,
        reasoning_format: str | None = None,
    ) -> ScriptedEngine:
        """The engine for ``script`` with ``model``'s tokenizer, writing replies in its
        family's tool-call and reasoning formats (or the named ones)."""
        from openforge.conversation import ToolCall
        from openforge.rendering.families.catalog import resolve_family
        from openforge.rendering.renderer import Renderer
        from openforge.rendering.tokenizer import load_tokenizer

        tok = load_tokenizer(str(model))
        renderer = Renderer(tok, family=resolve_family(tok, tool_format, reasoning_format))

        def encode(reply: ScriptedReply) -> list[int]:
            calls = [
                ToolCall(id=f"call_{i}", name=name, arguments=orjson.dumps(args).decode())
                for i, (name, args) in enumerate(reply.tool_calls)
            ]
            return renderer.encode_reply(reply.text, reply.reasoning, calls)

        return cls(load_script(script), encode, model=str(model), max_context=max_context)

    def info(self) -> EngineInfo:
        """Kind "scripted"; the context length is ``max_context`` or effectively unlimited."""
        return EngineInfo(
            kind="scripted",
            model=self._model,
            context_length=self._max_context or _NO_LIMIT,
            weight_version=self._weight_version,
        )

    def reply_ids(self, call_index: int) -> list[int]:
        """The output ids of the reply the ``call_index``-th call of a rollout gets."""
        return self._encoded[min(call_index, len(self._encoded) - 1)]

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Stream the rollout's next reply one token per chunk."""
        k = self._counters.get(request.rollout_id, 0)
        self._counters[request.rollout_id] = k + 1
        ids = self.reply_ids(k)
        delay_s = self._delay_s or self._delays[min(k, len(self._delays) - 1)]
        limit = len(ids)
        if request.params.max_tokens is not None:
            limit = min(limit, request.params.max_tokens)
        if self._max_context is not None:
            room = self._max_context - len(request.prompt_ids)
            if room <= 0:
                raise EngineError(
                    f"prompt of {len(request.prompt_ids)} tokens fills the context "
                    f"({self._max_context})"
                )
            limit = min(limit, room)
        finish = "stop" if limit == len(ids) else "length"
        for i in range(limit):
            if delay_s:
                await asyncio.sleep(delay_s)
            tid = ids[i]
            last = i == limit - 1
            yield TokenChunk(
                ids=[tid],
                logprobs=[scripted_logprob(tid, i)],
                finish_reason=finish if last else None,  # type: ignore[arg-type]
            )
        if limit == 0:
            yield TokenChunk(finish_reason="length")

    async def update_weights(self, path: str, version: str) -> None:
        """Nothing to load; records the version so the gateway's stamp can be checked."""
        self._weight_version = version

    async def close(self) -> None:
        """Nothing to release."""
