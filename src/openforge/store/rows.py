"""How rollouts and calls are laid out as table rows, shared by every SQL backend.

Token ids and logprobs are packed blobs (:mod:`openforge.store.schemas`), JSON fields
orjson bytes, the raw request zstd-compressed; both backends read and write the same
tuples, so a record round-trips identically through SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import orjson
import zstandard

from openforge.store.schemas import (
    CallRecord,
    CallRole,
    CallStatus,
    Rollout,
    RolloutStatus,
    decode_ids,
    decode_logprobs,
    encode_ids,
    encode_logprobs,
)

__all__ = [
    "CALL_COLUMNS",
    "CALL_WIDTH",
    "ROLE_KEY_COLUMNS",
    "ROLLOUT_COLUMNS",
    "call_from_row",
    "call_row",
    "mint_rollout",
    "new_rollout_key",
    "role_key_row",
    "rollout_from_row",
]

CALL_COLUMNS = (
    "id, rollout_id, seq, dialect, status, prompt_ids, output_ids, output_logprobs,"
    " prompt_tokens, output_tokens, finish_reason, request_model, engine, served_model,"
    " weight_version, fork, render_info, raw_request, conversation, completion, error,"
    " harness, created_at, queued_s, first_token_s, total_s, response_id, role"
)
CALL_WIDTH = 28
ROLLOUT_COLUMNS = (
    "id, key, status, task_id, group_id, reward, metadata, created_at, finished_at, details"
)


ROLE_KEY_COLUMNS = "key, rollout_id, role, created_at"


def new_rollout_key() -> str:
    """A rollout key: 24 random bytes (192 bits), URL-safe."""
    return secrets.token_urlsafe(24)


def mint_rollout(
    task_id: str | None, group_id: str | None, metadata: dict[str, Any] | None
) -> tuple[Rollout, tuple[Any, ...]]:
    """A new rollout (fresh id, fresh key) and its ``ROLLOUT_COLUMNS`` row."""
    rollout = Rollout(
        id="ro_" + secrets.token_hex(8),
        key=new_rollout_key(),
        task_id=task_id,
        group_id=group_id,
        metadata=dict(metadata or {}),
        created_at=time.time(),
    )
    row = (
        rollout.id,
        rollout.key,
        str(rollout.status),
        task_id,
        group_id,
        None,
        orjson.dumps(rollout.metadata),
        rollout.created_at,
        None,
        b"{}",
    )
    return rollout, row


def role_key_row(rollout_id: str, role: CallRole) -> tuple[str, tuple[Any, ...]]:
    """A fresh key for ``role`` on a rollout, and its ``ROLE_KEY_COLUMNS`` row."""
    key = new_rollout_key()
    return key, (key, rollout_id, str(role), time.time())


def rollout_from_row(row: Sequence[Any]) -> Rollout:
    """A rollout from its ``ROLLOUT_COLUMNS`` row."""
    return Rollout(
        id=row[0],
        key=row[1],
        status=RolloutStatus(row[2]),
        task_id=row[3],
        group_id=row[4],
        reward=row[5],
        metadata=orjson.loads(row[6]),
        created_at=row[7],
        finished_at=row[8],
        details=orjson.loads(row[9]),
    )


def call_row(call: CallRecord, compressor: zstandard.ZstdCompressor) -> tuple[Any, ...]:
    """The ``CALL_COLUMNS`` row of a call (ids packed, JSON encoded, request compressed)."""
    return (
        call.id,
        call.rollout_id,
        call.seq,
        call.dialect,
        str(call.status),
        encode_ids(call.prompt_ids),
        encode_ids(call.output_ids),
        encode_logprobs(call.output_logprobs),
        len(call.prompt_ids),
        len(call.output_ids),
        call.finish_reason,
        call.request_model,
        call.engine,
        call.served_model,
        call.weight_version,
        int(call.fork),
        orjson.dumps(call.render_info),
        compressor.compress(call.raw_request) if call.raw_request else None,
        orjson.dumps(call.conversation),
        orjson.dumps(call.completion),
        call.error,
        orjson.dumps(call.harness),
        call.created_at,
        call.queued_s,
        call.first_token_s,
        call.total_s,
        call.response_id,
        str(call.role),
    )


def call_from_row(
    row: Sequence[Any], tokens: bool, decompressor: zstandard.ZstdDecompressor
) -> CallRecord:
    """A call from its ``CALL_COLUMNS`` row; ``tokens=False``: the id columns were NULL."""
    raw = row[17]
    return CallRecord(
        id=row[0],
        rollout_id=row[1],
        seq=row[2],
        dialect=row[3],
        status=CallStatus(row[4]),
        prompt_ids=decode_ids(row[5]) if tokens else [],
        output_ids=decode_ids(row[6]) if tokens else [],
        output_logprobs=decode_logprobs(row[7]) if tokens else [],
        finish_reason=row[10],
        request_model=row[11],
        engine=row[12],
        served_model=row[13],
        weight_version=row[14],
        fork=bool(row[15]),
        render_info=orjson.loads(row[16]),
        raw_request=decompressor.decompress(raw) if raw else b"",
        conversation=orjson.loads(row[18]),
        completion=orjson.loads(row[19]),
        error=row[20],
        harness=orjson.loads(row[21]),
        created_at=row[22],
        queued_s=row[23],
        first_token_s=row[24],
        total_s=row[25],
        response_id=row[26],
        role=CallRole(row[27]),
    )
