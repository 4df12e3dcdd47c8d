"""Exports: veRL (parquet rows or a pickled ``DataProto``), SFT chat JSONL, and JSONL of everything.

The veRL layout follows veRL 0.9.1's agent loop output (``experimental/agent_loop``):
``prompts`` left-padded, ``responses`` right-padded, ``input_ids = prompts ++ responses``,
``attention_mask`` over both, ``position_ids = clip(cumsum(attention_mask) - 1, 0)``,
``response_mask`` (1 on trained tokens), ``rollout_log_probs``, and
``token_level_scores`` holding the reward on the last response token; ``uid`` in the
non-tensor batch groups samples for ``compute_grpo_outcome_advantage``. Parquet rows hold
the same fields unpadded (one list per row); :func:`verl_tensors` pads them.

Samples that show a VLM images carry them the way veRL's multimodal path reads them: the
parquet's ``images`` column holds each row's images in placeholder order as
``{"bytes", "path"}`` structs (the layout of veRL's RL datasets, ``data.image_key``), with
``image_sha256`` and ``image_grid_thw`` beside it; a pickled ``DataProto`` gets
``multi_modal_data = {"images": [PIL images]}`` per row, what veRL's agent loop hands its
processor. SFT records with images follow the HF/TRL vision layout: ``{"type": "image"}``
parts in the messages and an ``images`` list of files (each screenshot written once, by
digest); the tokenized form lists each image's digest, placeholder offset and grid with
the processor settings.
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from openforge.store.schemas import Blob, CallRecord, CallStatus, RolloutStatus
from openforge.traces.graph import TEACHER_ENGINE
from openforge.traces.samples import RolloutPlan, Sample, SampleImage, prompt_images

__all__ = [
    "VERL_COLUMNS",
    "image_digests",
    "openai_messages",
    "sft_image_digests",
    "sft_records",
    "to_dataproto",
    "verl_table",
    "verl_tensors",
    "write_jsonl",
    "write_sft",
    "write_verl",
]

VERL_COLUMNS = (
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "rollout_log_probs",
    "token_level_scores",
)


def grpo_uid(s: Sample) -> str:
    """GRPO's group: the rollout's group, else its task, else the rollout alone."""
    return s.group_id or (f"task:{s.task_id}" if s.task_id else f"rollout:{s.rollout_id}")


Array = np.ndarray[Any, Any]
# Token columns are random-looking ids: dictionary-encoding them costs ~4x the write time and
# makes the file larger than zstd alone; only the string columns repeat.
_DICTIONARY_COLUMNS = ["uid", "rollout_id", "task_id", "status", "mode", "drift"]


def _offsets(lengths: Array) -> Array:
    """Row offsets (int64, one more than rows) for rows of these lengths."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _large_list(offsets: Array, values: Array) -> pa.Array:
    """A list column straight from a flat buffer and its offsets (64-bit: no overflow)."""
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def _row_parts(flat: Array, offsets: Array, starts: Array, lengths: Array) -> Array:
    """Row ``i``'s ``flat[offsets[i] + starts[i]:][:lengths[i]]``, all rows concatenated.

    One view per row and one copy: far cheaper than a gather index of every token."""
    if not len(lengths):
        return flat[:0]
    begins = (offsets[:-1] + starts).tolist()
    return np.concatenate([flat[b : b + n] for b, n in zip(begins, lengths.tolist(), strict=True)])


def _ramps(lengths: Array) -> Array:
    """0..n-1 for each row of length n, concatenated (int32)."""
    if not len(lengths):
        return np.zeros(0, np.int32)
    ramp = np.arange(int(lengths.max()), dtype=np.int32)
    return np.concatenate([ramp[:n] for n in lengths.tolist()])


def _packed(rows: list[list[Any]], code: str, dtype: Any) -> Array:
    """Rows of Python numbers as one flat buffer: ``struct.pack`` of a whole row reads a
    list ~30% faster than ``np.fromiter`` (the C-level cost of reading Python ints)."""
    return np.frombuffer(b"".join([struct.pack(f"{len(r)}{code}", *r) for r in rows]), dtype)


def _masks(samples: Sequence[Sample], count: int) -> Array:
    """The loss masks as one int32 buffer; ``bytes()`` reads a 0/1 list ~4x faster than
    ``fromiter``, and anything outside 0..255 falls back to the general path."""
    try:
        flat = np.frombuffer(b"".join([bytes(s.loss_mask) for s in samples]), np.uint8)
        return flat.astype(np.int32)
    except ValueError:
        masks = itertools.chain.from_iterable(s.loss_mask for s in samples)
        return np.fromiter(masks, np.int32, count=count)


def image_digests(samples: Iterable[Sample]) -> list[str]:
    """Every image digest the samples show (each once, in first-seen order)."""
    return list(dict.fromkeys(i.sha256 for s in samples for i in s.images))


_IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _image_columns(samples: Sequence[Sample], blobs: Mapping[str, Blob]) -> dict[str, pa.Array]:
    """``images`` (veRL's ``{"bytes", "path"}`` per image), ``image_sha256``, ``image_grid_thw``."""
    missing = [d for d in image_digests(samples) if d not in blobs]
    if missing:
        raise ValueError(f"samples show images whose bytes were not given: sha256:{missing[0]}")
    return {
        "images": pa.array(
            [[{"bytes": blobs[i.sha256].data, "path": None} for i in s.images] for s in samples],
            pa.list_(_IMAGE),
        ),
        "image_sha256": pa.array([[i.sha256 for i in s.images] for s in samples]),
        "image_grid_thw": pa.array(
            [[list(i.grid_thw) for i in s.images] for s in samples], pa.list_(pa.list_(pa.int32()))
        ),
    }


def verl_table(samples: Sequence[Sample], blobs: Mapping[str, Blob] | None = None) -> pa.Table:
    """One unpadded row per sample with veRL's field names plus provenance columns.

    Each sample's ids are read from Python once (prompt then response, into one buffer);
    ``prompts``, ``responses`` and the rest are cut from flat numpy buffers. When a sample
    shows images, ``blobs`` (digest → bytes, :func:`~openforge.traces.source.load_blobs`)
    must hold them and the image columns are added.
    """
    p_len = np.array([len(s.prompt_ids) for s in samples], np.int64)
    r_len = np.array([len(s.response_ids) for s in samples], np.int64)
    n_in = p_len + r_len
    in_off, r_off = _offsets(n_in), _offsets(r_len)
    flat = _packed([ids for s in samples for ids in (s.prompt_ids, s.response_ids)], "i", np.int32)
    n_r = int(r_off[-1])
    logprobs = _packed([s.logprobs for s in samples], "f", np.float32)
    scores = np.zeros(n_r, np.float32)
    if len(samples):
        scores[r_off[1:] - 1] = [float(s.reward or 0.0) for s in samples]
    zeros = np.zeros(len(samples), np.int64)
    images = _image_columns(samples, blobs or {}) if any(s.images for s in samples) else {}
    return pa.table(
        {
            "prompts": _large_list(_offsets(p_len), _row_parts(flat, in_off, zeros, p_len)),
            "responses": _large_list(r_off, _row_parts(flat, in_off, p_len, r_len)),
            "input_ids": _large_list(in_off, flat),
            "attention_mask": _large_list(in_off, np.ones(int(in_off[-1]), np.int32)),
            "position_ids": _large_list(in_off, _ramps(n_in)),
            "response_mask": _large_list(r_off, _masks(samples, n_r)),
            "rollout_log_probs": _large_list(r_off, logprobs),
            "token_level_scores": _large_list(r_off, scores),
            "uid": pa.array([grpo_uid(s) for s in samples], pa.string()),
            "rollout_id": pa.array([s.rollout_id for s in samples], pa.string()),
            "task_id": pa.array([s.task_id for s in samples], pa.string()),
            "reward": pa.array([s.reward for s in samples], pa.float64()),
            "status": pa.array([s.status for s in samples], pa.string()),
            "mode": pa.array([str(s.mode) for s in samples], pa.string()),
            "call_ids": pa.array([s.call_ids for s in samples], pa.list_(pa.string())),
            "weight_versions": pa.array(
                [s.weight_versions for s in samples], pa.list_(pa.string())
            ),
            "drift": pa.array([s.drift for s in samples], pa.string()),
            **images,
        }
    )


def _column(table: pa.Table, name: str) -> tuple[Array, Array]:
    """A list column's flat values and its row lengths (any list type, chunked or not)."""
    col = table.column(name).combine_chunks()
    lengths = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    return col.flatten().to_numpy(zero_copy_only=False), lengths.astype(np.int64)


def _pad(values: Array, lengths: Array, width: int, out: Array, left: bool) -> None:
    """Scatter rows of ``lengths`` into ``out`` (rows x width), flush left or right."""
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.arange(len(values), dtype=np.int64) - np.repeat(_offsets(lengths)[:-1], lengths)
    if left:
        cols += np.repeat(width - lengths, lengths)
    out[rows, cols] = values


def verl_tensors(table: pa.Table, pad_id: int = 0) -> dict[str, Array]:
    """Pad a :func:`verl_table` the way veRL's agent loop does (prompts left, responses right)."""
    prompts, p_len = _column(table, "prompts")
    responses, r_len = _column(table, "responses")
    masks, _ = _column(table, "response_mask")
    logprobs, _ = _column(table, "rollout_log_probs")
    rewards = np.array([float(r or 0.0) for r in table.column("reward").to_pylist()], np.float32)
    n = len(p_len)
    p_max = int(p_len.max(initial=0))
    r_max = int(r_len.max(initial=0))
    out: dict[str, Array] = {
        "prompts": np.full((n, p_max), pad_id, np.int64),
        "responses": np.full((n, r_max), pad_id, np.int64),
        "response_mask": np.zeros((n, r_max), np.int64),
        "rollout_log_probs": np.zeros((n, r_max), np.float32),
        "token_level_scores": np.zeros((n, r_max), np.float32),
    }
    _pad(prompts, p_len, p_max, out["prompts"], left=True)
    _pad(responses, r_len, r_max, out["responses"], left=False)
    _pad(masks, r_len, r_max, out["response_mask"], left=False)
    _pad(logprobs, r_len, r_max, out["rollout_log_probs"], left=False)
    has = r_len > 0
    out["token_level_scores"][np.flatnonzero(has), r_len[has] - 1] = rewards[has]
    cols = np.arange(p_max + r_max)
    out["attention_mask"] = (
        (cols >= (p_max - p_len)[:, None]) & (cols < (p_max + r_len)[:, None])
    ).astype(np.int64)
    out["input_ids"] = np.concatenate([out["prompts"], out["responses"]], axis=1)
    positions: Array = np.cumsum(out["attention_mask"], axis=1) - 1
    out["position_ids"] = np.clip(positions, 0, None)
    return out


def to_dataproto(table: pa.Table, pad_id: int = 0) -> Any:
    """A ``verl.DataProto`` of the table (needs veRL importable; raises ImportError if not)."""
    import torch
    from verl import DataProto

    tensors = {k: torch.from_numpy(v) for k, v in verl_tensors(table, pad_id).items()}
    non_tensors = {
        k: np.array(table.column(k).to_pylist(), dtype=object)
        for k in ("uid", "rollout_id", "task_id", "status", "mode")
    }
    if "images" in table.column_names:
        rows = table.column("images").to_pylist()
        mm = np.empty(len(rows), dtype=object)
        mm[:] = [{"images": [_pil(i["bytes"]) for i in row]} for row in rows]
        non_tensors["multi_modal_data"] = mm
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def _pil(data: bytes) -> Any:
    """An image's bytes as the RGB PIL image veRL's processors take."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def write_verl(
    samples: Sequence[Sample],
    out: Path,
    pad_id: int = 0,
    blobs: Mapping[str, Blob] | None = None,
) -> str:
    """Parquet at ``out``, or a pickled ``DataProto`` when ``out`` ends in ``.pkl``."""
    table = verl_table(samples, blobs)
    if out.suffix == ".pkl":
        proto = to_dataproto(table, pad_id)
        with out.open("wb") as f:
            pickle.dump(proto, f)
        return "pickled verl.DataProto"
    # Min/max statistics of token ids help no reader; they cost ~20% of the write.
    pq.write_table(
        table,
        out,
        compression="zstd",
        use_dictionary=_DICTIONARY_COLUMNS,
        write_statistics=_DICTIONARY_COLUMNS,
    )
    return "parquet"


# -- SFT ---------------------------------------------------------------------------


def _content(parts: list[dict[str, Any]], images: list[str]) -> str | list[dict[str, Any]]:
    """Text as a string; with images, HF's vision parts (``{"type": "image"}``), each
    image's digest appended to ``images`` in order."""
    if all(p.get("type", "text") == "text" for p in parts):
        return "".join(str(p.get("text", "")) for p in parts)
    out: list[dict[str, Any]] = []
    for p in parts:
        if p.get("type", "text") == "text":
            out.append({"type": "text", "text": p.get("text", "")})
        else:
            images.append(str(p.get("sha256") or p.get("url", "")))
            out.append({"type": "image"})
    return out


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.get("id", ""),
            "type": "function",
            "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")},
        }
        for c in calls
    ]


def openai_messages(
    call: CallRecord, images: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The call's conversation plus its answer as OpenAI chat messages, and its tools.

    Image parts become ``{"type": "image"}``; their digests are appended to ``images``."""
    conv = call.conversation
    seen: list[str] = [] if images is None else images
    messages: list[dict[str, Any]] = []
    for m in conv.get("messages", []):
        content = _content(m["content"], seen)
        msg: dict[str, Any] = {"role": m.get("role", "user"), "content": content}
        if m.get("tool_calls"):
            msg["tool_calls"] = _tool_calls(m["tool_calls"])
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            msg["name"] = m["name"]
        messages.append(msg)
    answer: dict[str, Any] = {"role": "assistant", "content": call.completion.get("text", "")}
    if call.completion.get("tool_calls"):
        answer["tool_calls"] = _tool_calls(call.completion["tool_calls"])
    messages.append(answer)
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("parameters", {"type": "object", "properties": {}}),
            },
        }
        for t in conv.get("tools", [])
    ]
    return messages, tools


def sft_records(
    plans: Iterable[RolloutPlan], min_reward: float = 1e-9
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Chat records and tokenized records: every completed teacher call (whatever its
    rollout's outcome; SDK retries collapsed), and every trained call of a completed rollout
    whose reward is at least ``min_reward``; nothing of a rollout the reward-hack monitor
    flagged where the plan's options drop or zero flagged rollouts.

    Each record teaches its final assistant message; the tokenized form (exact ids, loss
    mask on the answer) is present where the call recorded token ids. For teacher calls
    those are the gateway's rendering of the conversation and ``encode_reply`` of the
    teacher's answer (``source: "teacher"``); RL exports never see teacher calls.
    """
    chat: list[dict[str, Any]] = []
    tokens: list[dict[str, Any]] = []
    for plan in plans:
        r = plan.rollout
        if plan.flagged is not None:
            continue  # a shortcut the options drop or zero is taught by no one, teacher included
        good = (
            plan.excluded is None
            and r.status == RolloutStatus.COMPLETED
            and r.reward is not None
            and r.reward >= min_reward
        )
        chosen = [c for c in plan.graph.teacher if c.status == CallStatus.OK]
        if good:
            chosen += [n.call for n in plan.graph.nodes if n.excluded is None]
        for call in sorted(chosen, key=lambda c: c.seq):
            if not call.conversation:
                continue
            images: list[str] = []
            messages, tools = openai_messages(call, images)
            record: dict[str, Any] = {"messages": messages}
            if tools:
                record["tools"] = tools
            if images:
                record["images"] = images  # digests; write_sft makes them files
            chat.append(record)
            if call.prompt_ids and call.output_ids:
                tokens.append(_token_record(r.id, call))
    return chat, tokens


def _token_record(rollout_id: str, call: CallRecord) -> dict[str, Any]:
    record: dict[str, Any] = {
        "rollout_id": rollout_id,
        "call_id": call.id,
        "source": "teacher" if call.engine == TEACHER_ENGINE else "rollout",
        "input_ids": call.prompt_ids + call.output_ids,
        "loss_mask": [0] * len(call.prompt_ids) + [1] * len(call.output_ids),
    }
    shown = prompt_images(call)
    if shown:
        record["images"] = [_image_json(i) for i in shown]
        record["image_processor"] = call.render_info.get("image_processor") or {}
    return record


def _image_json(i: SampleImage) -> dict[str, Any]:
    return {
        "sha256": i.sha256,
        "media_type": i.media_type,
        "offset": i.offset,
        "length": i.length,
        "grid_thw": list(i.grid_thw),
    }


def sft_image_digests(plans: Iterable[RolloutPlan], min_reward: float = 1e-9) -> list[str]:
    """Every image digest the SFT records of ``plans`` show (each once)."""
    chat, _ = sft_records(plans, min_reward)
    return list(dict.fromkeys(d for rec in chat for d in rec.get("images", [])))


_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


def _write_images(chat: list[dict[str, Any]], out: Path, blobs: Mapping[str, Blob]) -> None:
    """Each record's image digests → files in ``<out stem>.images/`` (one per digest),
    named in the record relative to ``out``'s directory."""
    folder = out.with_name(out.stem + ".images")
    written: dict[str, str] = {}
    for rec in chat:
        names: list[str] = []
        for digest in rec.get("images", []):
            if digest not in written:
                blob = blobs.get(digest)
                if blob is None:
                    raise ValueError(f"an SFT record shows image sha256:{digest}, not given")
                folder.mkdir(parents=True, exist_ok=True)
                name = f"{folder.name}/{digest}{_SUFFIX.get(blob.media_type, '.bin')}"
                (out.parent / name).write_bytes(blob.data)
                written[digest] = name
            names.append(written[digest])
        if names:
            rec["images"] = names


def _write_lines(path: Path, records: Iterable[dict[str, Any]]) -> int:
    n = 0
    with path.open("wb") as f:
        for rec in records:
            f.write(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            n += 1
    return n


def write_sft(
    plans: Iterable[RolloutPlan],
    out: Path,
    min_reward: float = 1e-9,
    blobs: Mapping[str, Blob] | None = None,
) -> int:
    """Chat JSONL at ``out`` and the tokenized form at ``<out stem>.tokens.jsonl``.

    Records with images need their bytes in ``blobs``: each image is written once to
    ``<out stem>.images/<sha256>.<ext>`` and named in the record's ``images`` (paths
    relative to ``out``'s directory, the layout HF ``datasets`` reads with an ``Image``
    feature)."""
    chat, tokens = sft_records(plans, min_reward)
    if not chat:
        return 0
    _write_images(chat, out, blobs or {})
    _write_lines(out, chat)
    _write_lines(out.with_name(out.stem + ".tokens.jsonl"), tokens)
    return len(chat)


# -- everything ----------------------------------------------------------------------


def plan_record(plan: RolloutPlan) -> dict[str, Any]:
    """A rollout plan as JSON: rollout, graph nodes, samples, exclusion and counters."""
    r = plan.rollout
    return {
        "rollout": {
            "id": r.id,
            "status": str(r.status),
            "task_id": r.task_id,
            "group_id": r.group_id,
            "reward": r.reward,
            "metadata": r.metadata,
            "flags": [dataclasses.asdict(f) for f in r.flags],
        },
        "excluded": plan.excluded,
        "nodes": [
            {
                "call_id": n.call.id,
                "seq": n.call.seq,
                "parent": n.parent.call.id if n.parent else None,
                "drift": str(n.drift),
                "excluded": n.excluded,
                "ambiguous": n.ambiguous,
                "retries": n.retries,
                "prompt_tokens": n.prompt_len,
                "output_tokens": n.full_len - n.prompt_len,
            }
            for n in plan.graph.nodes
        ],
        "teacher_calls": [c.id for c in plan.graph.teacher],
        # Judge and simulated-user calls: for analysis only, never samples.
        "serving_calls": [
            {"call_id": c.id, "seq": c.seq, "role": str(c.role), "status": str(c.status)}
            for c in plan.graph.serving
        ],
        "drift": [
            {"call_id": d.call_id, "message": d.message, "position": d.position}
            for d in plan.graph.drift
        ],
        "samples": [
            {
                "mode": str(s.mode),
                "prompt_ids": s.prompt_ids,
                "response_ids": s.response_ids,
                "loss_mask": s.loss_mask,
                "logprobs": s.logprobs,
                "spans": s.spans,
                "call_ids": s.call_ids,
                "weight_versions": s.weight_versions,
                "drift": s.drift,
                "reward": s.reward,
                "flags": s.flags,
                "images": [_image_json(i) for i in s.images],
            }
            for s in plan.samples
        ],
        "counts": plan.counts.as_dict(),
    }


def write_jsonl(plans: Iterable[RolloutPlan], out: Path) -> int:
    """One line per rollout plan (kept or excluded, with the reason)."""
    return _write_lines(out, (plan_record(p) for p in plans))
