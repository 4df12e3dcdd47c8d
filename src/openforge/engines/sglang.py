"""SGLang's native ``/generate`` API with ``input_ids``, as an engine.

Request (https://docs.sglang.io/basic_usage/sampling_params.html)::

    {"input_ids": [ids...], "stream": true, "return_logprob": true,
     "logprob_start_len": -1, "rid": ID,
     "sampling_params": {"max_new_tokens": N, "temperature": T, "top_p": P, "top_k": K,
                         "stop": [...], "stop_token_ids": [...], "no_stop_trim": true,
                         "skip_special_tokens": false, "sampling_seed": S}}

Each streamed object has ``output_ids`` and ``meta_info`` with ``output_token_logprobs``
(``[logprob, token_id, text]`` triples), ``completion_tokens`` and ``finish_reason``
(null, or ``{"type": "stop", "matched": str | int}`` / ``{"type": "length", ...}`` /
``{"type": "abort", ...}``). Depending on the server's ``--incremental-streaming-output``
the lists are cumulative or hold only new tokens; the parser accepts both by comparing
their length with ``completion_tokens``.

Weight updates: ``POST /update_weights_from_disk`` ``{"model_path": PATH,
"weight_version": V}`` answers ``{"success": bool, "message": str}``; pause and resume
with ``POST /pause_generation`` and ``POST /continue_generation``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from openforge.engines.base import EngineError, EngineRequest, TokenChunk
from openforge.engines.remote import RemoteEngine, StreamState, fit_max_tokens

__all__ = ["SGLangEngine"]


class SGLangEngine(RemoteEngine):
    """One SGLang server."""

    kind: ClassVar[str] = "sglang"
    generate_path: ClassVar[str] = "/generate"

    def payload(self, request: EngineRequest) -> dict[str, Any]:
        """The ``/generate`` body for ``request``."""
        params = request.params
        sampling: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "no_stop_trim": True,
            "skip_special_tokens": False,
        }
        sampling["max_new_tokens"] = fit_max_tokens(request, self.context_length)
        if params.stop:
            sampling["stop"] = params.stop
        if params.stop_token_ids:
            sampling["stop_token_ids"] = params.stop_token_ids
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        body: dict[str, Any] = {
            "input_ids": request.prompt_ids,
            "sampling_params": sampling,
            "stream": True,
            "return_logprob": True,
            "logprob_start_len": -1,
        }
        if request.request_id:
            body["rid"] = request.request_id
        return body

    def parse(self, event: dict[str, Any], state: StreamState) -> TokenChunk | None:
        """One ``/generate`` stream object to a :class:`TokenChunk` of the new tokens."""
        meta = event.get("meta_info") or {}
        triples = meta.get("output_token_logprobs") or []
        total = int(meta.get("completion_tokens", state.received + len(triples)))
        # Cumulative lists repeat what was sent; incremental ones hold only the new tail.
        new = triples[state.received :] if len(triples) == total else triples
        ids = [int(t[1]) for t in new]
        logprobs = [float(t[0]) for t in new]
        if len(ids) != total - state.received:
            raise EngineError(
                f"SGLang stream out of step: {total} completion tokens, "
                f"{state.received} received, {len(ids)} new"
            )
        state.received = total
        finish = meta.get("finish_reason")
        if not ids and not finish:
            return None
        chunk = TokenChunk(ids=ids, logprobs=logprobs)
        if finish:
            kind = finish.get("type") if isinstance(finish, dict) else str(finish)
            if kind == "abort":
                message = finish.get("message") if isinstance(finish, dict) else None
                raise EngineError(f"SGLang aborted the request: {message or finish}")
            chunk.finish_reason = "length" if kind == "length" else "stop"
            matched = finish.get("matched") if isinstance(finish, dict) else None
            if isinstance(matched, str):
                chunk.stop_text = matched
        return chunk

    async def update_weights(self, path: str, version: str) -> None:
        """Load the checkpoint at ``path`` in place (SGLang pauses while it loads)."""
        answer = await self.post_json(
            "/update_weights_from_disk", {"model_path": path, "weight_version": version}
        )
        if not answer.get("success", False):
            raise EngineError(f"{self.url} refused the weights at {path}: {answer.get('message')}")
        self._version = version

    async def pause(self) -> None:
        """Stop generation until :meth:`resume`."""
        await self.post_json("/pause_generation", {"mode": "in_place"})

    async def resume(self) -> None:
        """Resume after :meth:`pause`."""
        await self.post_json("/continue_generation")
