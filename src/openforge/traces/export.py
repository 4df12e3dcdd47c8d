"""Exports: veRL (parquet rows or a pickled ``DataProto``), SFT chat JSONL, and JSONL of everything.

The veRL layout follows veRL 0.9.1's agent loop output (``experimental/agent_loop``):
``prompts`` left-padded, ``responses`` right-padded, ``input_ids = prompts ++ responses``,
``attention_mask`` over both, ``position_ids = clip(cumsum(attention_mask) - 1, 0)``,
``response_mask`` (1 on trained tokens), ``rollout_log_probs``, and
``token_level_scores`` holding the reward on the last response token; ``uid`` in the
non-tensor batch groups samples for ``compute_grpo_outcome_advantage``. Parquet rows hold
the same fields unpadded (one list per row); :func:`verl_tensors` pads them.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from openforge.store.schemas import CallRecord, CallStatus, RolloutStatus
from openforge.traces.graph import TEACHER_ENGINE
from openforge.traces.samples import RolloutPlan, Sample

__all__ = [
    "VERL_COLUMNS",
    "openai_messages",
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


def _lists(rows: Sequence[Iterable[Any]], lengths: np.ndarray[Any, Any], dtype: Any) -> pa.Array:
    """A list column built from one flat numpy buffer (no per-row Python lists in Arrow)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype, count=int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _ranges(lengths: np.ndarray[Any, Any]) -> pa.Array:
    """0..n-1 for each row of length n."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.arange(int(offsets[-1]), dtype=np.int32) - np.repeat(offsets[:-1], lengths)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))


def verl_table(samples: Sequence[Sample]) -> pa.Table:
    """One unpadded row per sample with veRL's field names plus provenance columns."""
    p_len = np.array([len(s.prompt_ids) for s in samples], np.int32)
    r_len = np.array([len(s.response_ids) for s in samples], np.int32)
    n_in = p_len + r_len
    ones = pa.array(np.ones(int(n_in.sum()), np.int32))
    in_offsets = np.zeros(len(samples) + 1, np.int32)
    np.cumsum(n_in, out=in_offsets[1:])
    r_offsets = np.zeros(len(samples) + 1, np.int32)
    np.cumsum(r_len, out=r_offsets[1:])
    scores = np.zeros(int(r_len.sum()), np.float32)
    if len(samples):
        scores[r_offsets[1:] - 1] = [float(s.reward or 0.0) for s in samples]
    i32, f32 = np.int32, np.float32
    return pa.table(
        {
            "prompts": _lists([s.prompt_ids for s in samples], p_len, i32),
            "responses": _lists([s.response_ids for s in samples], r_len, i32),
            "input_ids": _lists(
                [itertools.chain(s.prompt_ids, s.response_ids) for s in samples], n_in, i32
            ),
            "attention_mask": pa.ListArray.from_arrays(pa.array(in_offsets), ones),
            "position_ids": _ranges(n_in),
            "response_mask": _lists([s.loss_mask for s in samples], r_len, i32),
            "rollout_log_probs": _lists([s.logprobs for s in samples], r_len, f32),
            "token_level_scores": pa.ListArray.from_arrays(pa.array(r_offsets), pa.array(scores)),
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
        }
    )


def verl_tensors(table: pa.Table, pad_id: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """Pad a :func:`verl_table` the way veRL's agent loop does (prompts left, responses right)."""
    prompts = table.column("prompts").to_pylist()
    responses = table.column("responses").to_pylist()
    masks = table.column("response_mask").to_pylist()
    logprobs = table.column("rollout_log_probs").to_pylist()
    rewards = [float(r or 0.0) for r in table.column("reward").to_pylist()]
    n = len(prompts)
    p_len = max((len(p) for p in prompts), default=0)
    r_len = max((len(r) for r in responses), default=0)
    out: dict[str, np.ndarray[Any, Any]] = {
        "prompts": np.full((n, p_len), pad_id, np.int64),
        "responses": np.full((n, r_len), pad_id, np.int64),
        "response_mask": np.zeros((n, r_len), np.int64),
        "rollout_log_probs": np.zeros((n, r_len), np.float32),
        "token_level_scores": np.zeros((n, r_len), np.float32),
        "attention_mask": np.zeros((n, p_len + r_len), np.int64),
    }
    for i in range(n):
        p, r = prompts[i], responses[i]
        out["prompts"][i, p_len - len(p) :] = p
        out["responses"][i, : len(r)] = r
        out["response_mask"][i, : len(r)] = masks[i]
        out["rollout_log_probs"][i, : len(r)] = logprobs[i]
        out["token_level_scores"][i, len(r) - 1] = rewards[i]
        out["attention_mask"][i, p_len - len(p) : p_len + len(r)] = 1
    out["input_ids"] = np.concatenate([out["prompts"], out["responses"]], axis=1)
    positions: np.ndarray[Any, Any] = np.cumsum(out["attention_mask"], axis=1) - 1
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
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def write_verl(samples: Sequence[Sample], out: Path, pad_id: int = 0) -> str:
    """Parquet at ``out``, or a pickled ``DataProto`` when ``out`` ends in ``.pkl``."""
    table = verl_table(samples)
    if out.suffix == ".pkl":
        proto = to_dataproto(table, pad_id)
        with out.open("wb") as f:
            pickle.dump(proto, f)
        return "pickled verl.DataProto"
    pq.write_table(table, out)
    return "parquet"


# -- SFT ---------------------------------------------------------------------------


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(p.get("type", "text") == "text" for p in parts):
        return "".join(str(p.get("text", "")) for p in parts)
    return [
        {"type": "text", "text": p.get("text", "")}
        if p.get("type", "text") == "text"
        else {"type": "image_url", "image_url": {"url": p.get("url", "")}}
        for p in parts
    ]


def _tool_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.get("id", ""),
            "type": "function",
            "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")},
        }
        for c in calls
    ]


def openai_messages(call: CallRecord) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The call's conversation plus its answer as OpenAI chat messages, and its tools."""
    conv = call.conversation
    messages: list[dict[str, Any]] = []
    for m in conv.get("messages", []):
        msg: dict[str, Any] = {"role": m.get("role", "user"), "content": _content(m["content"])}
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
    whose reward is at least ``min_reward``.

    Each record teaches its final assistant message; the tokenized form (exact ids, loss
    mask on the answer) is present where the call recorded token ids. For teacher calls
    those are the gateway's rendering of the conversation and ``encode_reply`` of the
    teacher's answer (``source: "teacher"``); RL exports never see teacher calls.
    """
    chat: list[dict[str, Any]] = []
    tokens: list[dict[str, Any]] = []
    for plan in plans:
        r = plan.rollout
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
            messages, tools = openai_messages(call)
            chat.append({"messages": messages, "tools": tools} if tools else {"messages": messages})
            if call.prompt_ids and call.output_ids:
                tokens.append(
                    {
                        "rollout_id": r.id,
                        "call_id": call.id,
                        "source": "teacher" if call.engine == TEACHER_ENGINE else "rollout",
                        "input_ids": call.prompt_ids + call.output_ids,
                        "loss_mask": [0] * len(call.prompt_ids) + [1] * len(call.output_ids),
                    }
                )
    return chat, tokens


def _write_lines(path: Path, records: Iterable[dict[str, Any]]) -> int:
    n = 0
    with path.open("wb") as f:
        for rec in records:
            f.write(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            n += 1
    return n


def write_sft(plans: Iterable[RolloutPlan], out: Path, min_reward: float = 1e-9) -> int:
    """Chat JSONL at ``out`` and the tokenized form at ``<out stem>.tokens.jsonl``."""
    chat, tokens = sft_records(plans, min_reward)
    if not chat:
        return 0
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
            }
            for s in plan.samples
        ],
        "counts": plan.counts.as_dict(),
    }


def write_jsonl(plans: Iterable[RolloutPlan], out: Path) -> int:
    """One line per rollout plan (kept or excluded, with the reason)."""
    return _write_lines(out, (plan_record(p) for p in plans))
