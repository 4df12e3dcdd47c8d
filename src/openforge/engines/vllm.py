"""vLLM's OpenAI-compatible completions API with token-id prompts, as an engine.

Checked against vLLM ``main`` as stored in late 2026 (the code logs refer to v0.21+;
``CompletionRequest`` in ``vllm/entrypoints/openai/completion/protocol.py``, the stream
in ``vllm/entrypoints/openai/completion/serving.py``).

Request (``POST /v1/completions``)::

    {"model": M, "prompt": [ids...], "max_tokens": N, "temperature": T, "top_p": P,
     "top_k": K, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
     "frequency_penalty": 0.0, "seed": S, "stop": [...], "stop_token_ids": [...],
     "logprobs": 0, "stream": S, "return_token_ids": true,
     "include_stop_str_in_output": true, "skip_special_tokens": false, "request_id": R,
     "structured_outputs": {"json": SCHEMA} | {"json_object": true}}   (response_format only)

``structured_outputs`` is ``CompletionRequest.structured_outputs`` (a
``StructuredOutputsParams``); vLLM applies the grammar's bitmask to the logits before
sampling, so with ``processed_logprobs`` the reported logprobs are the constrained ones.
Confirmed live on vLLM 0.32.0 (CPU): the request's ``disable_any_whitespace`` is not read
(the xgrammar and guidance backends take it from the server's
``--structured-outputs-config``), so a server meant to give compact JSON is started with
``--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'``
(the default ``auto`` backend refuses that option); the field is still sent for servers
that read it. A schema the xgrammar backend cannot compile is reported after the
stream's headers, as an error event with ``code: 400``: it is the request's own error
(:class:`EngineRequestError`) all the same.

Context: ``--max-model-len`` may be below the model's configured context, and vLLM
refuses a ``max_tokens`` above it (400). Before its first request the engine reads the
served model's ``max_model_len`` from ``GET /v1/models`` and caps its context to it; a
prompt past it is a :class:`ContextOverflow` (a context-length error in the caller's
dialect), as is vLLM's own 400 for one ("This model's maximum context length is N
tokens ...").

Every sampling field is sent even at its neutral value: vLLM fills a field the request
leaves out from the model's ``generation_config.json`` first ("user -> server default ->
OpenAI default" in ``CompletionRequest.to_sampling_params``), so an omitted ``top_k``
could silently become the checkpoint's ``top_k: 20`` and the recorded logprobs would
belong to another distribution than the one the gateway asked for.

Stream: ``data: {json}\\n\\n`` chunks, then ``data: [DONE]``. Each chunk is serialized
with ``exclude_unset``; ``choices[0]`` carries ``text`` (the delta), ``token_ids`` (the
new ids only; several per chunk under ``--stream-interval``), ``logprobs`` (delta lists
``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``), ``finish_reason``
(null, "stop", "length", "abort"), ``stop_reason`` (the matched stop string, the
matched stop token id, or null for EOS) and ``prompt_token_ids`` (the ids on the first
chunk, null on the others: 0.32.0 sends the field on every chunk). A stop string's tokens
stay in ``token_ids`` whatever ``include_stop_str_in_output`` says (that flag trims
``text`` only). A failure after the stream started arrives as ``data: {"error": {...}}``
before ``[DONE]``.

Whole answers: a call whose client does not stream (``EngineRequest.stream`` false) is
sent with ``"stream": false`` and answered by one ``CompletionResponse`` whose
``choices[0]`` (``CompletionResponseChoice``) has the same fields as a chunk's, for the
whole output: ``text``, ``token_ids``, ``logprobs``, ``finish_reason``, ``stop_reason``,
``prompt_token_ids`` (and ``prompt_logprobs``, null). It is parsed as one chunk. vLLM
then serializes one answer, not an event per token (its API server's per-token work
under many streams), and its non-streaming route still aborts a request whose client
disconnected.

Which logprobs: by default vLLM reports ``raw_logprobs`` -- the model's log-softmax
before temperature, penalties, top-k and top-p. RL importance ratios need the
distribution actually sampled from: start the server with
``--logprobs-mode processed_logprobs`` (``vllm/v1/sample/sampler.py``: logprobs taken
after penalties, temperature, min-p, top-k and top-p; FlashInfer's fused top-k/top-p
sampler is then not used).

Images: a call whose prompt shows a VLM images is refused (a 400 in the caller's dialect).
``/v1/completions`` takes a token prompt or text and nothing beside it; raw images with a
token prompt (``TokensPrompt.multi_modal_data``) exist only in the Python API. The one
HTTP route that takes token ids with images, the opt-in scale-out ``POST
/inference/v1/generate`` (``VLLM_ENABLE_SCALE_OUT_ENDPOINTS=1``;
``vllm/entrypoints/serve/disagg/protocol.py``), wants them as ``features``: per image an
``mm_hash``, a ``PlaceholderRange`` and ``kwargs_data``, a base64 msgpack
``MultiModalKwargsItem`` of *processed* pixel tensors that only vLLM's own serializer
writes (``serve/disagg/mm_serde.py``) and only its ``/render`` endpoints hand out, for a
whole chat rendered by vLLM, not for our token prompt. A client would have to render each
screenshot through the server's renderer first and then ship its pixel tensors
(megabytes per screenshot, per call, against a ~100 KB PNG) or bet on a cache hit by
hash, which the server never guarantees; the protocol's own TODO notes that Qwen-VL's
placeholder masks are not carried yet. Until vLLM takes images (or ``image_url`` parts)
beside ``token_ids``, VLMs are served by the local or SGLang engine.

Weight updates need the dev endpoints (``VLLM_SERVER_DEV_MODE=1``; routers in
``vllm/entrypoints/serve/dev/{rlhf,rpc,cache}/api_router.py``)::

    POST /pause?mode=wait                  -> {"status": "paused"}
    POST /collective_rpc {"method": "reload_weights",
                          "kwargs": {"weights_path": PATH, "is_checkpoint_format": true}}
                                           -> {"results": [...]} (or an empty 200)
    POST /reset_prefix_cache               -> {"success": bool}
    POST /resume                           -> {"status": "resumed"}

``Worker.reload_weights(*args, **kwargs)`` forwards to
``GPUModelRunner.reload_weights(weights_iterator=None, weights_path=None,
is_checkpoint_format=True)`` (``vllm/v1/worker/gpu_worker.py``,
``vllm/v1/worker/gpu_model_runner.py``), which points ``model_config.model`` at
``weights_path`` and streams the safetensors there through the model's
``load_weights``. Late-2025 releases had a zero-argument ``Worker.reload_weights()``
that re-read the original checkpoint: there the RPC fails with an unexpected-keyword
error, which surfaces here as an :class:`EngineError`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import httpx
import orjson

from openforge.conversation import ResponseFormat
from openforge.engines.base import (
    ContextOverflow,
    EngineError,
    EngineRequest,
    EngineRequestError,
    TokenChunk,
)
from openforge.engines.remote import RemoteEngine, StreamState, fit_max_tokens

__all__ = ["VLLMEngine", "structured_outputs"]

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}
# vLLM's refusal of a prompt past its context (``InputProcessor``'s "This model's maximum
# context length is N tokens. However, your prompt contains M input tokens ...").
_CONTEXT_LIMIT = re.compile(rb"maximum context length is (\d+) tokens")


class VLLMEngine(RemoteEngine):
    """One vLLM server."""

    kind: ClassVar[str] = "vllm"
    # The served model's own name, kept while requests name a LoRA adapter instead.
    _base_model: str | None = None
    generate_path: ClassVar[str] = "/v1/completions"
    # The first chunk echoes the whole prompt's ids; the gateway sent them.
    unread_fields: ClassVar[tuple[bytes, ...]] = (b'"prompt_token_ids"',)

    def payload(self, request: EngineRequest) -> dict[str, Any]:
        """The completions body for ``request`` (token-id prompt, streamed, with ids)."""
        if request.images:
            # See "Images" in the module docstring: no vLLM HTTP route takes raw images
            # beside a token prompt.
            raise EngineRequestError(
                "the vLLM engine client sends token prompts to /v1/completions, which takes "
                "no images (vLLM's token-in route with images, /inference/v1/generate, wants "
                "pixel tensors its own renderer serialized); serve VLMs with --engine "
                "sglang or local"
            )
        params = request.params
        body: dict[str, Any] = {
            "prompt": request.prompt(),
            "max_tokens": fit_max_tokens(request, self.context_length),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": max(params.top_k, 0),  # 0 disables top-k in vLLM
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "logprobs": 0,
            "stream": request.stream,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if self.model:  # vLLM serves its only model when none is named
            body["model"] = self.model
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = params.stop
        if params.stop_token_ids:
            body["stop_token_ids"] = params.stop_token_ids
        if request.request_id:
            body["request_id"] = request.request_id
        if params.response_format is not None:
            body["structured_outputs"] = structured_outputs(params.response_format)
        return body

    def parse(self, event: dict[str, Any], state: StreamState) -> TokenChunk | None:
        """One completions stream chunk to a :class:`TokenChunk`."""
        choices = event.get("choices") or []
        if not choices:
            return None  # the usage-only chunk
        choice = choices[0]
        if "token_ids" not in choice:
            raise EngineError(
                "vLLM sent no token_ids: the server predates the return_token_ids field"
            )
        ids = [int(t) for t in choice.get("token_ids") or []]
        logprobs = _token_logprobs(choice.get("logprobs"), len(ids))
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

    async def prepare(self) -> bool:
        """Cap the context to the ``max_model_len`` the server reports on ``/v1/models``
        (``--max-model-len`` may be below the model's own context; a ``max_tokens`` past
        it is refused with a 400)."""
        try:
            response = await self.client.get(
                self.url + "/v1/models", headers=self._headers, timeout=10.0
            )
        except httpx.HTTPError:
            return False  # unreachable now: the request reports it; asked again next time
        if response.status_code != 200:
            return response.status_code < 500
        try:
            cards = orjson.loads(response.content).get("data") or []
        except (orjson.JSONDecodeError, AttributeError):
            return True
        # The served model (LoRA adapters are listed beside it, with a parent).
        for card in cards:
            if not isinstance(card, dict):
                continue
            named = card.get("id") == self.model if self.model else card.get("parent") is None
            limit = card.get("max_model_len")
            if named and isinstance(limit, int) and limit > 0:
                self.context_length = min(self.context_length, limit)
                break
        return True

    def refused(self, status: int, body: bytes, request: EngineRequest) -> EngineError:
        """vLLM's 400 for a prompt past its context becomes :class:`ContextOverflow`."""
        found = _CONTEXT_LIMIT.search(body)
        if found is None:
            return super().refused(status, body, request)
        limit = int(found.group(1))
        self.context_length = min(self.context_length, limit)
        return ContextOverflow(len(request.prompt_ids), limit, f"{self.url} refused it")

    async def update_weights(self, path: str, version: str) -> None:
        """Drain, reload the checkpoint at ``path`` on every worker, reset caches, resume."""
        # mode=wait lets requests in flight finish on the old weights (keep would resume
        # them on the new weights with old KV, splicing two policies into one sample).
        await self.post_json("/pause", params={"mode": "wait"})
        try:
            await self.post_json(
                "/collective_rpc",
                {
                    "method": "reload_weights",
                    "kwargs": {"weights_path": path, "is_checkpoint_format": True},
                },
            )
            answer = await self.post_json("/reset_prefix_cache")
            if answer.get("success") is False:
                raise EngineError(f"{self.url} could not reset its prefix cache after the reload")
            self.route_adapter(None, version)  # the reloaded weights are the policy now
        finally:
            await self.post_json("/resume")

    async def load_adapter(self, name: str, path: str, version: str) -> None:
        """Serve the PEFT LoRA adapter directory at ``path`` as ``name`` (replacing it in
        place when already loaded): later requests name it as their model and are
        stamped ``version``; the base model stays served under its own name. The server
        needs ``--enable-lora`` (``--max-lora-rank`` at least the adapter's) and
        ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. Requests in flight are not drained
        here: the caller pauses around it, as around :meth:`update_weights`."""
        await self.post_json(
            "/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": path, "load_inplace": True},
        )
        self.route_adapter(name, version)

    def route_adapter(self, name: str | None, version: str) -> None:
        """Name the adapter ``name`` (loaded on the server already, e.g. through another
        gateway) as the model of later requests, stamped ``version``; None: the served
        model itself. Loads nothing."""
        if self._base_model is None:
            self._base_model = self.model
        self.model = self._base_model if name is None else name
        self._version = version

    async def pause(self) -> None:
        """Stop scheduling new tokens; requests in flight are kept and resume later."""
        await self.post_json("/pause", params={"mode": "keep"})

    async def resume(self) -> None:
        """Resume after :meth:`pause`."""
        await self.post_json("/resume")


def structured_outputs(fmt: ResponseFormat) -> dict[str, Any]:
    """vLLM's ``structured_outputs`` (``StructuredOutputsParams`` in
    ``vllm/sampling_params.py``) for a response format: ``{"json": schema}`` or
    ``{"json_object": true}``, compact (``disable_any_whitespace``) like the local engine."""
    if fmt.type == "json_schema" and fmt.schema:
        return {"json": fmt.schema, "disable_any_whitespace": True}
    return {"json_object": True, "disable_any_whitespace": True}


def _token_logprobs(logprobs_obj: Any, count: int) -> list[float]:
    """The sampled tokens' logprobs from a completions ``logprobs`` delta."""
    if count == 0:
        return []
    values = (logprobs_obj or {}).get("token_logprobs") if isinstance(logprobs_obj, dict) else None
    if not isinstance(values, list) or len(values) != count:
        raise EngineError(
            f"vLLM sent {count} token ids with logprobs {values!r} "
            "(the request asks logprobs=0 and return_token_ids=true)"
        )
    if any(v is None for v in values):
        raise EngineError("vLLM sent a null logprob for a sampled token")
    return [float(v) for v in values]
