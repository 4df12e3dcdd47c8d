"""vLLM's OpenAI-compatible completions API with token-id prompts, as an engine.

Request (``POST /v1/completions``, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)::

    {"model": M, "prompt": [ids...], "max_tokens": N, "temperature": T, "top_p": P,
     "top_k": K, "seed": S, "stop": [...], "stop_token_ids": [...], "logprobs": 0,
     "stream": true, "return_token_ids": true, "include_stop_str_in_output": true,
     "skip_special_tokens": false}

Each streamed ``choices[0]`` carries ``token_ids`` (the new ids only),
``logprobs.token_logprobs`` (one per new id), ``finish_reason`` ("stop" | "length" |
"abort") and ``stop_reason`` (the matched stop string, a stop token id, or null for EOS).

vLLM reports logprobs of the raw model distribution unless the server runs with
``--logprobs-mode processed_logprobs`` (after temperature and top-k/top-p), which is
what RL importance ratios need; run it that way.

Weight updates use vLLM's RL endpoints (server started with ``VLLM_SERVER_DEV_MODE=1``):
``POST /pause?mode=keep``, ``POST /collective_rpc`` with ``{"method": "reload_weights",
"kwargs": {"weights_path": PATH}}``, ``POST /reset_prefix_cache``, ``POST /resume``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from openforge.engines.base import EngineError, EngineRequest, TokenChunk
from openforge.engines.remote import RemoteEngine, StreamState, fit_max_tokens

__all__ = ["VLLMEngine"]

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class VLLMEngine(RemoteEngine):
    """One vLLM server."""

    kind: ClassVar[str] = "vllm"
    generate_path: ClassVar[str] = "/v1/completions"

    def payload(self, request: EngineRequest) -> dict[str, Any]:
        """The completions body for ``request`` (token-id prompt, streamed, with ids)."""
        params = request.params
        body: dict[str, Any] = {
            "prompt": request.prompt_ids,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "stream": True,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        body["max_tokens"] = fit_max_tokens(request, self.context_length)
        if self.model:  # vLLM serves its only model when none is named
            body["model"] = self.model
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        if params.stop_token_ids:
            body["stop_token_ids"] = params.stop_token_ids
        if request.request_id:
            body["request_id"] = request.request_id
        return body

    def parse(self, event: dict[str, Any], state: StreamState) -> TokenChunk | None:
        """One completions stream chunk to a :class:`TokenChunk`."""
        choices = event.get("choices") or []
        if not choices:
            return None  # a usage-only chunk
        choice = choices[0]
        ids = [int(t) for t in choice.get("token_ids") or []]
        logprobs_obj = choice.get("logprobs") or {}
        logprobs = [float(x) for x in logprobs_obj.get("token_logprobs") or []]
        if ids and len(logprobs) != len(ids):
            raise EngineError(
                f"vLLM sent {len(ids)} token ids with {len(logprobs)} logprobs "
                "(the request asks logprobs=0 and return_token_ids=true)"
            )
        state.received += len(ids)
        finish = choice.get("finish_reason")
        if not ids and finish is None:
            return None
        chunk = TokenChunk(ids=ids, logprobs=logprobs)
        if finish is not None:
            chunk.finish_reason = _FINISH.get(finish, "stop")  # type: ignore[assignment]
            stop = choice.get("stop_reason")
            if isinstance(stop, str):
                chunk.stop_text = stop
        return chunk

    async def update_weights(self, path: str, version: str) -> None:
        """Pause (keeping requests), reload weights from ``path``, reset caches, resume."""
        await self.post_json("/pause", params={"mode": "keep"})
        try:
            await self.post_json(
                "/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": path}},
            )
            await self.post_json("/reset_prefix_cache")
            self._version = version
        finally:
            await self.post_json("/resume")

    async def pause(self) -> None:
        """Stop scheduling new tokens; requests in flight are kept."""
        await self.post_json("/pause", params={"mode": "keep"})

    async def resume(self) -> None:
        """Resume after :meth:`pause`."""
        await self.post_json("/resume")
