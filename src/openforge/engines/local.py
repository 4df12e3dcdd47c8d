"""The embedded engine: a HF transformers model on CPU (or CUDA), continuously batched.

One worker thread owns the model. Between forward passes it admits new requests (one
batched prefill, left-padded), drops finished or cancelled ones, applies weight updates,
then steps every active sequence together through one shared, left-padded KV cache. Each
sampled token goes straight to its request's asyncio queue, so the gateway's event loop
never runs a forward pass and streams tokens as they are produced.

Finish rules: a sampled EOS or stop token id ends the sequence with "stop" (the token is
included: it was sampled and is trained on); a stop string ends it once the detokenized
output contains it ("stop", the tokens that completed it included, ``stop_text`` set);
max tokens, capped so prompt + output fit the context, ends it with "length".

Prefix cache: an agent's next call repeats its previous call's prompt and answer, and every
call of a harness starts with the same system prompt and tools (~480 tokens for claw). When
a sequence finishes, the keys and values of its tokens are kept (newest first, up to
``prefix_cache_tokens`` tokens in all); a new prompt that starts with at least
``_MIN_REUSE`` of those tokens copies them into its rows and prefills only the rest. The
rows keep their positions, so only the attention's summation order differs from a full
prefill. A weight update empties the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from openforge.engines.base import (
    ContextOverflow,
    EngineError,
    EngineInfo,
    EngineRequest,
    TokenChunk,
)
from openforge.engines.constraints import Constraint, Grammars
from openforge.engines.sampling import RowSampling, sample_rows
from openforge.engines.vision_local import VisionRunner
from openforge.rendering.vision import load_vision

__all__ = ["LocalEngine"]

log = logging.getLogger(__name__)

_Deliver = Callable[[TokenChunk | BaseException], None]
_MIN_REUSE = 16  # a shorter shared prefix is not worth a separate prefill pass
_GROUP_SLACK = 64  # rows whose shared prefixes differ by less are prefilled in one pass


@dataclass(eq=False, slots=True)
class _Prefix:
    """The keys and values of one finished sequence's tokens, per layer ``[1, H, T, D]``."""

    ids: torch.Tensor  # [T] on the CPU
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


class _PrefixCache:
    """Finished sequences' KV, most recent last, bounded by a total token count."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.entries: list[_Prefix] = []
        self.hits = 0
        self.reused_tokens = 0

    def lookup(self, prompt: list[int]) -> tuple[_Prefix, int] | None:
        """The entry sharing the longest prefix with ``prompt`` and that length (at most
        ``len(prompt) - 1``: one token must be fed to get logits), if ≥ ``_MIN_REUSE``."""
        ids = torch.tensor(prompt)
        best: tuple[_Prefix, int] | None = None
        for entry in self.entries:
            n = min(len(entry.ids), len(ids) - 1)
            if n < _MIN_REUSE:
                continue
            same = entry.ids[:n] == ids[:n]
            shared = n if bool(same.all()) else int(same.int().argmin())
            if shared >= _MIN_REUSE and (best is None or shared > best[1]):
                best = (entry, shared)
        return best

    def add(self, entry: _Prefix) -> None:
        if self.max_tokens <= 0 or len(entry.ids) > self.max_tokens:
            return
        n = len(entry.ids)
        # An entry the new one extends (the same rollout's previous call) is redundant.
        self.entries = [
            e for e in self.entries
            if not (len(e.ids) <= n and bool((entry.ids[: len(e.ids)] == e.ids).all()))
        ]  # fmt: skip
        self.entries.append(entry)
        while sum(len(e.ids) for e in self.entries) > self.max_tokens:
            self.entries.pop(0)

    def clear(self) -> None:
        self.entries = []


@dataclass(eq=False, slots=True)
class _Seq:
    """One request inside the worker."""

    prompt: list[int]
    budget: int  # tokens it may still produce
    stops: list[str]
    stop_ids: frozenset[int]
    sampling: RowSampling
    deliver: _Deliver
    constraint: Constraint | None = None  # structured output: allowed tokens per step
    out: list[int] = field(default_factory=list)
    cancelled: bool = False
    done: bool = False


@dataclass(slots=True)
class _Batch:
    """The running batch: rows share a left-padded KV cache."""

    seqs: list[_Seq]
    cache: Any  # transformers DynamicCache
    mask: torch.Tensor  # [B, T] 1 for real tokens, 0 for left padding
    positions: torch.Tensor  # [B] position of the next token
    last: torch.Tensor  # [B] the token to feed next
    # No row is padded: the model can skip the mask (causal SDPA, native GQA, no repeat_kv).
    dense: bool = False


class LocalEngine:
    """Token-in/token-out generation with an in-process transformers model.

    ``model`` is a name or path accepted by :func:`openforge.models.registry.resolve_model`.
    """

    def __init__(
        self,
        model: str,
        *,
        device: str | None = None,
        dtype: torch.dtype = torch.float32,
        max_batch: int = 32,
        threads: int | None = None,
        max_context: int | None = None,
        prefix_cache_tokens: int = 8192,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from openforge.models.registry import resolve_model

        self._name = model
        self.path: Path = resolve_model(model)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if threads is not None:
            torch.set_num_threads(threads)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        vision = load_vision(self.path, self._token_id)
        auto: Any = AutoModelForCausalLM
        if vision is not None:  # Qwen2.5-VL / Qwen3-VL: vision tower + language model
            from transformers import AutoModelForImageTextToText

            auto = AutoModelForImageTextToText
        # use_kernels=False: transformers 5 otherwise kernelizes the model (Hub kernels on
        # CUDA), so the engine and the trainer, which turns them off too, compute alike.
        loaded: Any = auto.from_pretrained(str(self.path), dtype=dtype, use_kernels=False)
        self.model: Any = loaded.to(self.device).eval()
        self._vision_runner = (
            VisionRunner(self.model, vision, self.device) if vision is not None else None
        )
        config = self.model.config.get_text_config()
        self.context_length = int(getattr(config, "max_position_embeddings", 2048))
        if max_context is not None:
            self.context_length = min(self.context_length, max_context)
        self.eos_ids = _eos_ids(self.model)
        self.grammars = Grammars(self.tokenizer, int(config.vocab_size), self.eos_ids)
        self.max_batch = max_batch
        self._version = "0"
        # ~46 KB per token for SmolLM2-135M in float32; 0 turns prefix reuse off.
        self.prefix_cache = _PrefixCache(prefix_cache_tokens)
        self._inbox: queue.SimpleQueue[_Seq | _Control | None] = queue.SimpleQueue()
        self._batch: _Batch | None = None
        self._waiting: list[_Seq] = []
        self._count = 0  # rows in the batch + waiting, as of the worker's last iteration
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="openforge-local", daemon=True)
        self._thread.start()

    # ---- public API -------------------------------------------------------------------

    def info(self) -> EngineInfo:
        """Kind "local", the model as given, its context length and weight version."""
        return EngineInfo(
            kind="local",
            model=self._name,
            context_length=self.context_length,
            weight_version=self._version,
        )

    @property
    def active(self) -> int:
        """How many sequences are in the running batch or waiting to join it."""
        return self._count

    async def generate(self, request: EngineRequest) -> AsyncIterator[TokenChunk]:
        """Stream sampled ids and logprobs; cancelling the consumer drops the sequence."""
        if self._closed:
            raise EngineError("the local engine is closed")
        seq = self._make_seq(request)
        fmt = request.params.response_format
        if fmt is not None:  # compiling can take a while for a large schema: off the loop
            seq.constraint = await asyncio.to_thread(self.grammars.matcher, fmt)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[TokenChunk | BaseException] = asyncio.Queue()

        def deliver(item: TokenChunk | BaseException) -> None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(chunks.put_nowait, item)

        seq.deliver = deliver
        if seq.budget <= 0:
            yield TokenChunk(finish_reason="length")
            return
        runner = self._vision_runner
        if runner is not None:  # a VLM: one request at a time, off the shared batch
            task = asyncio.create_task(asyncio.to_thread(self._run_vision, runner, seq, request))
        else:
            self._inbox.put(seq)
        try:
            while True:
                item = await chunks.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            if not seq.done:
                seq.cancelled = True
                self._inbox.put(None)  # wake the worker so the slot is freed now
            if runner is not None:
                await task

    def _run_vision(self, runner: VisionRunner, seq: _Seq, request: EngineRequest) -> None:
        """Generate one VLM sequence (on a worker thread); failures reach the consumer."""
        try:
            runner.run(
                seq.prompt,
                request.images,
                lambda logits: _sample_constrained(logits, [seq]),
                lambda token, logprob: seq.cancelled or self._emit(seq, token, logprob),
            )
        except Exception as exc:
            log.exception("local engine: VLM request failed")
            seq.deliver(EngineError(f"local engine failed: {exc}"))

    async def update_weights(self, path: str, version: str) -> None:
        """Load the safetensors checkpoint directory (or file) at ``path`` as ``version``."""
        state = await asyncio.to_thread(self._read_weights, Path(path))
        await self.load_state_dict(state, version)

    def _read_weights(self, path: Path) -> dict[str, torch.Tensor]:
        """The checkpoint's tensors under the model's own parameter names.

        A checkpoint's names can differ from the module's: transformers saves Qwen-VL
        models under the hub's names (``visual.*``, ``model.layers.*``) and renames them
        to its modules' (``model.visual.*``, ``model.language_model.*``) as it loads. Such
        a directory is loaded through ``from_pretrained``, which applies the renaming."""
        state = _read_safetensors(path)
        if set(state) <= set(self.model.state_dict()) or not (path / "config.json").is_file():
            return state
        # no Hub kernels, as in __init__
        fresh: Any = type(self.model).from_pretrained(
            str(path), dtype=self.model.dtype, use_kernels=False
        )
        renamed: dict[str, torch.Tensor] = fresh.state_dict()
        return renamed

    async def load_state_dict(self, state: dict[str, torch.Tensor], version: str) -> None:
        """Replace the weights between two forward passes; sequences in flight continue."""

        def apply() -> None:
            runner = self._vision_runner
            with runner.lock if runner is not None else contextlib.nullcontext():
                missing, unexpected = self.model.load_state_dict(state, strict=False)
            real_missing = [k for k in missing if not _is_tied(self.model, k)]
            if real_missing or unexpected:
                raise EngineError(
                    f"weights for version {version!r} do not fit the model: "
                    f"missing {real_missing[:5]}, unexpected {unexpected[:5]}"
                )
            self._version = version
            self.prefix_cache.clear()  # keys and values of the old weights

        await self._call_in_worker(apply)

    async def close(self) -> None:
        """Stop the worker; requests still running end with finish reason "abort"."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(None)
        await asyncio.to_thread(self._thread.join)

    def _token_id(self, token: str) -> int | None:
        found = self.tokenizer.convert_tokens_to_ids(token)
        return found if isinstance(found, int) and found != self.tokenizer.unk_token_id else None

    # ---- request set-up ---------------------------------------------------------------

    def _make_seq(self, request: EngineRequest) -> _Seq:
        params = request.params
        if not request.prompt_ids:
            raise EngineError("the prompt is empty")
        context = min(request.context_length or self.context_length, self.context_length)
        room = context - len(request.prompt_ids)
        if room < 0:
            raise ContextOverflow(len(request.prompt_ids), context)
        budget = room if params.max_tokens is None else min(params.max_tokens, room)
        generator: torch.Generator | None = None
        if params.temperature > 0:
            generator = torch.Generator(device=self.device)
            if params.seed is None:
                generator.seed()
            else:
                generator.manual_seed(params.seed)
        return _Seq(
            prompt=list(request.prompt_ids),
            budget=budget,
            stops=[s for s in params.stop if s],
            stop_ids=frozenset(params.stop_token_ids) | self.eos_ids,
            sampling=RowSampling(params.temperature, params.top_p, params.top_k, generator),
            deliver=lambda item: None,
        )

    async def _call_in_worker(self, fn: Callable[[], None]) -> None:
        control = _Control(fn)
        self._inbox.put(control)
        await asyncio.wrap_future(control.future)

    # ---- the worker -------------------------------------------------------------------

    def _run(self) -> None:
        with torch.inference_mode():
            while not self._closed:
                try:
                    self._iterate()
                except Exception as exc:  # a failed pass fails its requests, not the engine
                    log.exception("local engine step failed")
                    self._fail_all(EngineError(f"local engine failed: {exc}"))
        self._fail_all(None)

    def _iterate(self) -> None:
        block = self._batch is None and not self._waiting
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                break
            block = False
            if isinstance(item, _Seq):
                self._waiting.append(item)
            elif isinstance(item, _Control):
                item.run()
        if self._closed:
            return
        self._drop_finished()
        self._waiting = [s for s in self._waiting if not s.cancelled]
        running = len(self._batch.seqs) if self._batch else 0
        room = self.max_batch - running
        if self._waiting and room > 0:
            joining, self._waiting = self._waiting[:room], self._waiting[room:]
            self._admit(joining)
        if self._batch is not None:
            self._drop_finished()
        if self._batch is not None:
            self._decode()
            self._drop_finished()
        self._count = (len(self._batch.seqs) if self._batch else 0) + len(self._waiting)

    def _fail_all(self, error: BaseException | None) -> None:
        seqs = (self._batch.seqs if self._batch else []) + self._waiting
        self._batch, self._waiting, self._count = None, [], 0
        for seq in seqs:
            if seq.done or seq.cancelled:
                continue
            seq.done = True
            seq.deliver(error if error is not None else TokenChunk(finish_reason="abort"))

    def _admit(self, seqs: list[_Seq]) -> None:
        """Prefill the new sequences, sample their first token, join the batch.

        Sequences that share a cached prefix are prefilled together from it; the rest
        together from scratch.
        """
        hits: dict[int, list[tuple[int, _Seq, _Prefix]]] = {}
        fresh: list[_Seq] = []
        for seq in seqs:
            hit = self.prefix_cache.lookup(seq.prompt)
            if hit is None:
                fresh.append(seq)
            else:
                hits.setdefault(id(hit[0]), []).append((hit[1], seq, hit[0]))
        parts: list[tuple[_Prefix | None, int, list[_Seq]]] = []
        for found in hits.values():
            # One pass per run of similar shared lengths: a row reuses the run's shortest.
            found.sort(key=lambda h: h[0])
            start = 0
            for i in range(1, len(found) + 1):
                if i == len(found) or found[i][0] - found[start][0] > _GROUP_SLACK:
                    run = found[start:i]
                    parts.append((run[0][2], run[0][0], [seq for _, seq, _ in run]))
                    start = i
        if fresh:
            parts.append((None, 0, fresh))
        for prefix, shared, members in parts:
            new = self._prefill(members, prefix, shared)
            self._batch = new if self._batch is None else _merge(self._batch, new)

    def _prefill(self, seqs: list[_Seq], prefix: _Prefix | None, shared: int) -> _Batch:
        """One forward pass over the prompts' uncached tails (left-padded after the shared
        ``prefix[:shared]`` columns); samples each row's first token."""
        from transformers import DynamicCache

        width = max(len(s.prompt) - shared for s in seqs)
        ids = torch.full((len(seqs), width), self.eos_ids_pad, dtype=torch.long)
        tail = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            rest = seq.prompt[shared:]
            ids[row, width - len(rest) :] = torch.tensor(rest)
            tail[row, width - len(rest) :] = 1
        ids, tail = ids.to(self.device), tail.to(self.device)
        positions = shared + (tail.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([tail.new_ones((len(seqs), shared)), tail], dim=1)
        cache = DynamicCache(config=self.model.config)
        if prefix is not None:
            for layer, (k, v) in enumerate(zip(prefix.keys, prefix.values, strict=True)):
                size = (len(seqs), -1, -1, -1)
                cache.update(k[:, :, :shared].expand(size), v[:, :, :shared].expand(size), layer)
            self.prefix_cache.hits += len(seqs)
            self.prefix_cache.reused_tokens += shared * len(seqs)
        dense = bool(mask.all())
        out = self.model(
            input_ids=ids,
            attention_mask=None if dense else mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        new = _Batch(
            seqs=seqs,
            cache=cache,
            mask=mask,
            dense=dense,
            positions=positions[:, -1] + 1,
            last=torch.zeros(len(seqs), dtype=torch.long),
        )
        self._accept(new, out.logits[:, -1, :])
        return new

    def _decode(self) -> None:
        batch = self._batch
        assert batch is not None
        batch.mask = torch.cat([batch.mask, batch.mask.new_ones((len(batch.seqs), 1))], dim=1)
        out = self.model(
            input_ids=batch.last[:, None].to(self.device),
            attention_mask=None if batch.dense else batch.mask,
            position_ids=batch.positions[:, None],
            cache=batch.cache,
            use_cache=True,
        )
        batch.positions = batch.positions + 1
        self._accept(batch, out.logits[:, -1, :])

    def _accept(self, batch: _Batch, logits: torch.Tensor) -> None:
        """Sample one token per row, stream it, and decide who is finished."""
        ids, logprobs = _sample_constrained(logits, batch.seqs)
        batch.last = torch.tensor(ids, dtype=torch.long, device=self.device)
        for seq, token, logprob in zip(batch.seqs, ids, logprobs, strict=True):
            if seq.cancelled or seq.done:
                continue
            self._emit(seq, token, logprob)

    def _emit(self, seq: _Seq, token: int, logprob: float) -> bool:
        """Stream one sampled token of ``seq``; True once the sequence is finished."""
        seq.out.append(token)
        chunk = TokenChunk(ids=[token], logprobs=[logprob])
        if token in seq.stop_ids:
            chunk.finish_reason = "stop"
        elif seq.stops and (hit := self._stop_hit(seq)) is not None:
            chunk.finish_reason, chunk.stop_text = "stop", hit
        elif len(seq.out) >= seq.budget:
            chunk.finish_reason = "length"
        seq.done = chunk.finish_reason is not None
        seq.deliver(chunk)
        return seq.done

    def _stop_hit(self, seq: _Seq) -> str | None:
        # Only a suffix can hold a new match: earlier tokens were checked when they came.
        longest = max(len(s) for s in seq.stops)
        tail = self.tokenizer.decode(seq.out[-(longest + 4) :], skip_special_tokens=False)
        for stop in seq.stops:
            if stop in tail:
                return stop
        return None

    def _drop_finished(self) -> None:
        batch = self._batch
        if batch is None:
            return
        keep = [i for i, s in enumerate(batch.seqs) if not (s.done or s.cancelled)]
        if len(keep) == len(batch.seqs):
            return
        if self.prefix_cache.max_tokens > 0:
            for i, seq in enumerate(batch.seqs):
                if seq.done and not seq.cancelled and i not in keep:
                    self.prefix_cache.add(_row_prefix(batch, i, seq))
        if not keep:
            self._batch = None
            return
        index = torch.tensor(keep, device=self.device)
        mask = batch.mask[index]
        # Columns that are padding in every remaining row cost attention for nothing.
        first = int(torch.nonzero(mask.sum(0))[0])
        for layer in batch.cache.layers:
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
        batch.seqs = [batch.seqs[i] for i in keep]
        batch.mask = mask[:, first:]
        batch.dense = bool(batch.mask.all())
        batch.positions = batch.positions[index]
        batch.last = batch.last[index]

    @property
    def eos_ids_pad(self) -> int:
        """The id used for left padding (never attended to)."""
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else min(self.eos_ids, default=0)


@dataclass(eq=False, slots=True)
class _Control:
    """Work the worker runs between two forward passes (weight updates)."""

    fn: Callable[[], None]
    future: Future[None] = field(default_factory=Future)

    def run(self) -> None:
        try:
            self.fn()
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(None)


def _sample_constrained(logits: torch.Tensor, seqs: list[_Seq]) -> tuple[list[int], list[float]]:
    """Sample one token per row. Rows under a constraint get their disallowed logits set to
    ``-inf`` first, so the token and its logprob come from the constrained distribution."""
    constrained = [
        (row, s.constraint)
        for row, s in enumerate(seqs)
        if s.constraint is not None and not (s.cancelled or s.done)
    ]
    if constrained:
        logits = logits.float().clone()
        for row, constraint in constrained:
            allowed = constraint.mask().to(logits.device)
            width = min(len(allowed), logits.shape[-1])
            logits[row, :width].masked_fill_(~allowed[:width], float("-inf"))
            logits[row, width:] = float("-inf")
    ids, logprobs = sample_rows(logits, [s.sampling for s in seqs])
    for row, constraint in constrained:
        constraint.advance(ids[row])
    return ids, logprobs


def _merge(old: _Batch, new: _Batch) -> _Batch:
    """Stack two batches, left-padding the shorter cache so the time axes line up."""
    t_old, t_new = old.mask.shape[1], new.mask.shape[1]
    width = max(t_old, t_new)

    def pad(t: torch.Tensor, by: int) -> torch.Tensor:
        if by == 0:
            return t
        shape = list(t.shape)
        shape[-2 if t.dim() == 4 else 1] = by
        zeros = t.new_zeros(shape)
        return torch.cat([zeros, t], dim=-2 if t.dim() == 4 else 1)

    for lo, ln in zip(old.cache.layers, new.cache.layers, strict=True):
        lo.keys = torch.cat([pad(lo.keys, width - t_old), pad(ln.keys, width - t_new)])
        lo.values = torch.cat([pad(lo.values, width - t_old), pad(ln.values, width - t_new)])
    mask = torch.cat([pad(old.mask, width - t_old), pad(new.mask, width - t_new)])
    return _Batch(
        seqs=old.seqs + new.seqs,
        cache=old.cache,
        mask=mask,
        dense=bool(mask.all()),
        positions=torch.cat([old.positions, new.positions]),
        last=torch.cat([old.last, new.last]),
    )


def _row_prefix(batch: _Batch, row: int, seq: _Seq) -> _Prefix:
    """Row ``row``'s cached keys and values: its prompt and every output token but the
    last (sampled, never fed back)."""
    cols = torch.nonzero(batch.mask[row]).squeeze(-1)
    ids = torch.tensor((seq.prompt + seq.out)[: len(cols)])
    keys = [layer.keys[row : row + 1, :, cols].clone() for layer in batch.cache.layers]
    values = [layer.values[row : row + 1, :, cols].clone() for layer in batch.cache.layers]
    return _Prefix(ids=ids, keys=keys, values=values)


def _eos_ids(model: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (model.config, getattr(model, "generation_config", None)):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _is_tied(model: Any, key: str) -> bool:
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return key in tied if isinstance(tied, dict | list | set) else False


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    if not files:
        raise EngineError(f"no .safetensors files at {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
