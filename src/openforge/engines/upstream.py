"""A teacher model behind a commercial API, as a text-level engine.

The conversation goes to an OpenAI-compatible ``POST {base}/chat/completions`` or an
Anthropic-compatible ``POST {base}/v1/messages`` as is; the answer comes back as one
:class:`Completion` (text, reasoning, tool calls, usage) with no token ids or logprobs.
Its calls are teacher calls (``EngineInfo.kind == "upstream"``): exported for SFT, never
as RL samples. The wire format's client side (request body, answer parsing) lives in its
dialect package (:mod:`openforge.dialects.openai_chat.client`,
:mod:`openforge.dialects.anthropic.client`); this module owns the transport and maps its
failures to :class:`EngineError` / :class:`EngineOverloaded`.

Base URL and key come from the arguments, else ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``
or ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import orjson

from openforge.conversation import Completion, Conversation
from openforge.dialects.anthropic.client import MessagesClient
from openforge.dialects.client import AnswerError, Client, error_message
from openforge.dialects.openai_chat.client import ChatClient
from openforge.engines.base import EngineError, EngineInfo, EngineOverloaded

__all__ = ["UpstreamEngine"]

Api = Literal["openai", "anthropic"]
_DEFAULT_URL = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
_CLIENTS: dict[Api, Client] = {"openai": ChatClient(), "anthropic": MessagesClient()}


class UpstreamEngine:
    """Passes conversations to an OpenAI- or Anthropic-compatible API (a teacher)."""

    def __init__(
        self,
        api: Api,
        *,
        url: str | None = None,
        api_key: str | None = None,
        model: str = "",
        context_length: int = 200_000,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if api not in ("openai", "anthropic"):
            raise EngineError(f"--api must be openai or anthropic, not {api!r}")
        env = api.upper()
        self.api: Api = api
        self.url = (url or os.environ.get(f"{env}_BASE_URL") or _DEFAULT_URL[api]).rstrip("/")
        self._key = api_key or os.environ.get(f"{env}_API_KEY", "")
        self._wire = _CLIENTS[api]
        self.model = model
        self.context_length = context_length
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0))

    def info(self) -> EngineInfo:
        """Kind "upstream": calls through this engine are teacher calls."""
        return EngineInfo(
            kind="upstream", model=self.model or self.url, context_length=self.context_length
        )

    async def complete(self, conversation: Conversation) -> AsyncIterator[Completion]:
        """Ask the upstream API and yield its one finished answer."""
        model = self.model or conversation.model
        wire = self._wire.request(conversation, model, self._key)
        try:
            response = await self.client.post(
                self.url + wire.path, content=wire.body, headers=dict(wire.headers)
            )
        except httpx.HTTPError as exc:
            raise EngineError(f"upstream {self.url} unreachable: {exc!r}") from exc
        data = _json_or_error(response, self.url)
        try:
            completion = self._wire.parse(data, model)
        except AnswerError as exc:
            raise EngineError(str(exc)) from exc
        yield completion

    async def close(self) -> None:
        """Close the HTTP client if this engine made it."""
        if self._own_client:
            await self.client.aclose()


def _json_or_error(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        data = {"error": {"message": response.text[:500]}}
    if response.status_code >= 400 or not isinstance(data, dict):
        message = error_message(data)
        text = f"upstream {url}: HTTP {response.status_code}: {message or response.text[:500]}"
        if response.status_code in (429, 503, 529):
            raise EngineOverloaded(text)
        raise EngineError(text)
    return data
