"""SGLang's native ``/generate`` API with ``input_ids``, as an engine.

Checked against SGLang ``main`` as stored in late 2026: ``GenerateReqInput`` and
``UpdateWeightFromDiskReqInput`` in ``python/sglang/srt/managers/io_struct.py``,
``SamplingParams`` in ``python/sglang/srt/sampling/sampling_params.py``, the routes in
``python/sglang/srt/entrypoints/http_server.py``, the stream objects in the tokenizer
manager's output processor and ``managers/logprob_ops.py``.

Request (``POST /generate``)::

    {"input_ids": [ids...], "stream": S, "return_logprob": true,
     "logprob_start_len": -1, "rid": ID, "image_data": ["data:image/png;base64,..."],
     "sampling_params": {"max_new_tokens": N, "temperature": T, "top_p": P, "top_k": K,
                         "min_p": 0.0, "repetition_penalty": 1.0,
                         "presence_penalty": 0.0, "frequency_penalty": 0.0,
                         "stop": [...], "stop_token_ids": [...], "no_stop_trim": true,
                         "skip_special_tokens": false, "sampling_seed": S,
                         "json_schema": "<schema as JSON text>"}}   (response_format only)

``top_k: -1`` is SGLang's "no top-k" (``0`` is rejected); ``temperature: 0`` becomes
greedy (``top_k = 1``). Every sampling field is sent at its neutral value so a
server-side default cannot change the distribution behind the recorded logprobs.

Stream: ``data: {json}\\n\\n`` objects, then ``data: [DONE]``; an error inside the
stream is ``data: {"error": {"message": ...}}``. Each object has ``output_ids`` and
``meta_info`` with ``id``, ``finish_reason``, ``prompt_tokens``, ``completion_tokens``
(always the running total), ``cached_tokens``, ``weight_version`` and
``output_token_logprobs``: ``[logprob, token_id, text_or_null]`` triples. By default
``output_ids`` and ``output_token_logprobs`` are cumulative (the whole output so far,
``text`` null until the last object); with ``--incremental-streaming-output`` they hold
only the new tokens. The parser takes either by comparing the list's length with
``completion_tokens``. ``finish_reason`` is null, ``{"type": "stop", "matched": str |
int}`` (a stop string, or the stop/EOS token id), ``{"type": "length", "length": N}`` or
``{"type": "abort", "message": ..., "status_code": ..., "err_type": ...}``. The ids are
never trimmed: a stop string's tokens and the stop token are in ``output_ids`` (the
detokenizer's ``trim_matched_stop`` cuts ``text`` only, and ``no_stop_trim`` keeps it).

Whole answers (``"stream": false``, for a client that does not stream): one object,
the last stream object's shape with the whole output (``text``, ``output_ids``,
``meta_info`` with every ``output_token_logprobs`` triple), parsed as one chunk.

Which logprobs: SGLang's sampler reports ``log(softmax(logits / temperature))`` after
penalties and logit bias but *before* top-k, top-p and min-p renormalisation (with
``SGLANG_RETURN_ORIGINAL_LOGPROB`` set, before temperature too; greedy requests get the
raw log-softmax). No server flag makes them the filtered distribution, so they equal
the sampling distribution only when top-k, top-p and min-p are off; the engine warns
once when a request sets them.

Weight updates: ``POST /update_weights_from_disk {"model_path": PATH, "weight_version":
V, "flush_cache": true, "abort_all_requests": false}`` answers ``{"success", "message",
"num_paused_requests"}`` with 200, or 400 when ``success`` is false. Pause and resume:
``POST /pause_generation {"mode": "abort" | "retract" | "in_place"}`` and
``POST /continue_generation {}``, both answering ``{"message", "status": "ok"}``.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, ClassVar

import orjson

from openforge.conversation import ResponseFormat
from openforge.engines.base import EngineError, EngineRequest, TokenChunk
from openforge.engines.remote import RemoteEngine, StreamState, fit_max_tokens

__all__ = ["SGLangEngine", "json_schema_text"]

log = logging.getLogger(__name__)


class SGLangEngine(RemoteEngine):
    """One SGLang server."""

    kind: ClassVar[str] = "sglang"
    generate_path: ClassVar[str] = "/generate"
    _warned_filters: bool = False

    def payload(self, request: EngineRequest) -> dict[str, Any]:
        """The ``/generate`` body for ``request``."""
        params = request.params
        filtered = params.top_k > 0 or params.top_p < 1.0
        if filtered and params.temperature > 0 and not self._warned_filters:
            self._warned_filters = True
            log.warning(
                "%s: SGLang reports logprobs before top-k/top-p filtering; with top_k=%s "
                "top_p=%s they are not the probabilities the tokens were sampled with",
                self.url,
                params.top_k,
                params.top_p,
            )
        sampling: dict[str, Any] = {
            "max_new_tokens": fit_max_tokens(request, self.context_length),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "no_stop_trim": True,
            "skip_special_tokens": False,
        }
        if params.stop:
            sampling["stop"] = params.stop
        if params.stop_token_ids:
            sampling["stop_token_ids"] = params.stop_token_ids
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        if params.response_format is not None:
            sampling["json_schema"] = json_schema_text(params.response_format)
        body: dict[str, Any] = {
            "input_ids": request.prompt(),
            "sampling_params": sampling,
            "stream": request.stream,
            "return_logprob": True,
            "logprob_start_len": -1,
        }
        if request.request_id:
            body["rid"] = request.request_id
        if request.images:  # GenerateReqInput.image_data: one data URL per image, in order
            body["image_data"] = [
                f"data:{i.media_type};base64,{base64.b64encode(i.data).decode()}"
                for i in request.images
            ]
        return body

    def parse(self, event: dict[str, Any], state: StreamState) -> TokenChunk | None:
        """One ``/generate`` stream object to a :class:`TokenChunk` of the new tokens."""
        meta = event.get("meta_info") or {}
        triples = meta.get("output_token_logprobs")
        if triples is None:
            raise EngineError("SGLang sent no output_token_logprobs (return_logprob ignored)")
        total = int(meta.get("completion_tokens", state.received + len(triples)))
        new = _new_triples(triples, total, state.received)
        ids = [int(t[1]) for t in new]
        logprobs = [float(t[0]) for t in new]
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
            "/update_weights_from_disk",
            {
                "model_path": path,
                "weight_version": version,
                "flush_cache": True,
                "abort_all_requests": False,
            },
        )
        if not answer.get("success", False):
            raise EngineError(f"{self.url} refused the weights at {path}: {answer.get('message')}")
        self._version = version

    async def pause(self) -> None:
        """Stop generation until :meth:`resume`; running requests stay where they are."""
        await self.post_json("/pause_generation", {"mode": "in_place"})

    async def resume(self) -> None:
        """Resume after :meth:`pause`."""
        await self.post_json("/continue_generation", {})


def json_schema_text(fmt: ResponseFormat) -> str:
    """SGLang's ``sampling_params.json_schema`` (a JSON string) for a response format;
    ``json_object`` is the schema of any object."""
    schema = fmt.schema if fmt.type == "json_schema" and fmt.schema else {"type": "object"}
    return orjson.dumps(schema).decode()


def _new_triples(triples: list[Any], total: int, received: int) -> list[Any]:
    """The triples not yet seen, from a cumulative or an incremental list.

    Cumulative lists hold at least ``total`` entries (the output so far); incremental
    ones hold exactly ``total - received``. The two agree on the first object.
    """
    if len(triples) >= total and total >= received:
        return triples[received:total]
    if len(triples) == total - received:
        return triples
    raise EngineError(
        f"SGLang stream out of step: {total} completion tokens, {received} received, "
        f"{len(triples)} logprob entries"
    )
