"""How rollouts and calls are laid out as table rows, shared by every SQL backend.

Token ids and logprobs are packed blobs (:mod:`openforge.store.schemas`), JSON fields
orjson bytes, the raw request zstd-compressed; a call that extends an earlier call of its
rollout keeps only what is new (:mod:`openforge.store.delta`). Both backends read and write
the same tuples, so a record round-trips identically through SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import zstandard

from openforge.store.delta import (
    Delta,
    StoredBase,
    base_ids,
    best_root,
    choose_delta,
    ids_text,
    joined_text,
    resolve_order,
    splice,
)
from openforge.store.errors import StoreError
from openforge.store.schemas import (
    CallRecord,
    CallRole,
    CallStatus,
    Flag,
    Rollout,
    RolloutStatus,
    decode_ids,
    decode_logprobs,
    encode_ids,
    encode_logprobs,
)

__all__ = [
    "BASE_HOPS",
    "CALL_COLUMNS",
    "CALL_WIDTH",
    "ROLE_KEY_COLUMNS",
    "ROLLOUT_COLUMNS",
    "ROLLOUT_WIDTH",
    "RequestColumns",
    "call_row",
    "calls_from_rows",
    "flags_json",
    "foreign_bases",
    "mint_rollout",
    "new_rollout_key",
    "request_columns",
    "role_key_row",
    "rollout_from_row",
    "tables_ddl",
]

CALL_COLUMNS = (
    "id, rollout_id, seq, dialect, status, prompt_ids, output_ids, output_logprobs,"
    " prompt_tokens, output_tokens, finish_reason, request_model, engine, served_model,"
    " weight_version, fork, render_info, raw_request, conversation, completion, error,"
    " harness, created_at, queued_s, first_token_s, total_s, response_id, role, delta"
)
CALL_WIDTH = 29
_DELTA = 28  # the ``delta`` column: NULL for a row stored whole
ROLLOUT_COLUMNS = (
    "id, key, status, task_id, group_id, reward, metadata, created_at, finished_at, details,"
    " flags, run_id, split"
)
ROLLOUT_WIDTH = 13


ROLE_KEY_COLUMNS = "key, rollout_id, role, created_at"

# The rollouts and calls tables (and their indexes) as every backend creates them, each
# type spelled by the backend (:func:`tables_ddl`); columns in row order.
_TABLES = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
{rollouts_first}    id TEXT PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    task_id TEXT,
    group_id TEXT,
    reward {real},
    metadata {json} NOT NULL,
    created_at {real} NOT NULL,
    finished_at {real},
    details {json} NOT NULL,
{rollouts_more}    flags {json} NOT NULL DEFAULT '[]',
    run_id TEXT,
    split TEXT
);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts(group_id);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts(status);
CREATE INDEX IF NOT EXISTS rollouts_run ON rollouts(run_id);
CREATE TABLE IF NOT EXISTS calls (
    id TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL REFERENCES rollouts(id),
    seq INTEGER NOT NULL,
    dialect TEXT NOT NULL,
    status TEXT NOT NULL,
    prompt_ids {blob},
    output_ids {blob},
    output_logprobs {blob},
    prompt_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    finish_reason TEXT,
    request_model TEXT NOT NULL,
    engine TEXT NOT NULL,
    served_model TEXT NOT NULL,
    weight_version TEXT NOT NULL,
    fork INTEGER NOT NULL,
    render_info {json} NOT NULL,
    raw_request {blob},
    conversation {json} NOT NULL,
    completion {json} NOT NULL,
    error TEXT,
    harness {json} NOT NULL,
    created_at {real} NOT NULL,
    queued_s {real} NOT NULL,
    first_token_s {real},
    total_s {real} NOT NULL,
    response_id TEXT,
    role TEXT NOT NULL DEFAULT 'policy',
    delta {json}
);
CREATE UNIQUE INDEX IF NOT EXISTS calls_rollout_seq ON calls(rollout_id, seq);
CREATE INDEX IF NOT EXISTS calls_response ON calls(response_id) WHERE response_id IS NOT NULL;
"""


def tables_ddl(
    real: str, blob: str, json: str, rollouts_first: str = "", rollouts_more: str = ""
) -> str:
    """The DDL of the rollouts and calls tables with the backend's types for floats,
    bytes and JSON, and its own columns of ``rollouts`` (each a line of the table's
    body, ending in a comma and a newline) first and after ``details``."""
    return _TABLES.format(
        real=real, blob=blob, json=json, rollouts_first=rollouts_first, rollouts_more=rollouts_more
    )


def new_rollout_key() -> str:
    """A rollout key: 24 random bytes (192 bits), URL-safe."""
    return secrets.token_urlsafe(24)


def mint_rollout(
    task_id: str | None,
    group_id: str | None,
    metadata: dict[str, Any] | None,
    run_id: str | None = None,
    split: str | None = None,
) -> tuple[Rollout, tuple[Any, ...]]:
    """A new rollout (fresh id, fresh key) and its ``ROLLOUT_COLUMNS`` row."""
    rollout = Rollout(
        id="ro_" + secrets.token_hex(8),
        key=new_rollout_key(),
        task_id=task_id,
        group_id=group_id,
        metadata=dict(metadata or {}),
        created_at=time.time(),
        run_id=run_id,
        split=split,
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
        b"[]",
        run_id,
        split,
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
        flags=[Flag.from_json(d) for d in orjson.loads(row[10])],
        run_id=row[11],
        split=row[12],
    )


def flags_json(flags: Sequence[Flag]) -> bytes:
    """The ``flags`` column of a rollout's row."""
    return orjson.dumps(list(flags))


# Compared and hashed by identity (eq=False): the store keeps the calls in flight in a
# WeakSet, where hashing the fields would hash every byte of the request.
@dataclass(frozen=True, slots=True, weakref_slot=True, eq=False)
class RequestColumns:
    """A call's request-side columns (prompt ids, raw request, conversation), packed and
    stored against a base: what :func:`call_row` needs before the answer exists, so a
    gateway can compute it while the engine generates (:meth:`Store.prepare_call`)."""

    call_id: str
    prompt_tokens: int
    raw_size: int
    prompt_blob: bytes
    raw_blob: bytes | None
    conversation: bytes  # the stored (possibly delta) conversation JSON
    delta: Delta | None
    # The whole request, kept for the call's successor (its base).
    prompt_text: bytes  # the prompt's ids as delta.ids_text writes them
    raw: bytes
    full_conversation: bytes

    def fits(self, call: CallRecord) -> bool:
        """Whether these columns were computed for ``call`` as it is now."""
        return (
            self.call_id == call.id
            and self.prompt_tokens == len(call.prompt_ids)
            and self.raw_size == len(call.raw_request)
        )


def request_columns(
    call: CallRecord,
    compressor: zstandard.ZstdCompressor,
    base: StoredBase | None = None,
    roots: Sequence[StoredBase] = (),
) -> RequestColumns:
    """The request-side columns of ``call``, stored against ``base`` when that leaves out
    enough (:mod:`openforge.store.delta`), else against the one of ``roots`` sharing the
    longest start of its prompt when that does. Reads only the call's id, prompt ids, raw
    request and conversation."""
    conversation = orjson.dumps(call.conversation)
    prompt_text = _prompt_text(call)
    n, raw_request = len(call.prompt_ids), call.raw_request
    delta = choose_delta(base, call.id, prompt_text, n, raw_request, conversation)
    if delta is None and roots:
        root = best_root(roots, prompt_text)
        delta = choose_delta(root, call.id, prompt_text, n, raw_request, conversation)
    prompt, raw, conv = call.prompt_ids, call.raw_request, conversation
    if delta is not None:
        prompt = prompt[delta.prompt_ids :]
        raw = raw[delta.raw[0] : len(raw) - delta.raw[1]]
        conv = conv[delta.conversation[0] : len(conv) - delta.conversation[1]]
    return RequestColumns(
        call.id,
        len(call.prompt_ids),
        len(call.raw_request),
        encode_ids(prompt),
        # A delta row always has a frame (its middle may be empty); a whole row's empty
        # request is NULL, as before deltas.
        compressor.compress(raw) if raw or delta is not None else None,
        conv,
        delta,
        prompt_text,
        call.raw_request,
        conversation,
    )


def _prompt_text(call: CallRecord) -> bytes:
    """The call's prompt ids as :func:`~openforge.store.delta.ids_text` writes them: the
    JSON the caller made (which must hold exactly the prompt's ids: the gateway's is the
    engine request's), when it starts and ends with the prompt's first and last ids; else
    made here."""
    made, ids = call.prompt_json, call.prompt_ids
    if made is not None and made[:1] == b"[" and made[-1:] == b"]":
        text = made[1:-1]
        if _same_ends(text, ids):
            return text
    return ids_text(ids)


def _same_ends(text: bytes, ids: list[int]) -> bool:
    """Whether ``text`` starts and ends with the first and last of ``ids``: checked in
    constant time, as counting its ids would step through every byte, the very cost the
    caller's text is there to save."""
    if len(ids) < 2:
        return text == (b"%d" % ids[0] if ids else b"")
    return text.startswith(b"%d," % ids[0]) and text.endswith(b",%d" % ids[-1])


def call_row(
    call: CallRecord,
    compressor: zstandard.ZstdCompressor,
    base: StoredBase | None = None,
    request: RequestColumns | None = None,
    roots: Sequence[StoredBase] = (),
) -> tuple[tuple[Any, ...], StoredBase]:
    """The ``CALL_COLUMNS`` row of a call (ids packed, JSON encoded, request compressed),
    stored against ``base`` or one of ``roots`` when that leaves out enough
    (:func:`request_columns`); and the call as the base of its successor. ``request``:
    its request columns computed earlier (against a base of that time, which is
    committed, so still a valid base), used when they still fit the call."""
    if request is None or not request.fits(call):
        request = request_columns(call, compressor, base, roots)
    delta = request.delta
    row = (
        call.id,
        call.rollout_id,
        call.seq,
        call.dialect,
        str(call.status),
        request.prompt_blob,
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
        request.raw_blob,
        request.conversation,
        orjson.dumps(call.completion),
        call.error,
        orjson.dumps(call.harness),
        call.created_at,
        call.queued_s,
        call.first_token_s,
        call.total_s,
        call.response_id,
        str(call.role),
        delta.to_json() if delta is not None else None,
    )
    stored = StoredBase(
        call.id,
        joined_text(request.prompt_text, ids_text(call.output_ids)),
        len(call.prompt_ids) + len(call.output_ids),
        request.raw,
        request.full_conversation,
        root=delta is None and bool(call.prompt_ids),
    )
    return row, stored


# How many rounds of reads by id a reader makes for the bases a rollout's rows name: a
# root is whole, so one; a row edited by hand could name a delta row, which the next
# round brings (past that, the missing base is an error naming it).
BASE_HOPS = 4


def foreign_bases(rows: Iterable[Sequence[Any]]) -> list[str]:
    """The bases that delta rows among ``rows`` name and ``rows`` lack (roots: whole
    calls of other rollouts), for the reader to fetch by id."""
    have: set[str] = set()
    named: set[str] = set()
    for r in rows:
        have.add(r[0])
        if r[_DELTA] is not None:
            named.add(Delta.from_json(r[_DELTA], r[0]).base)
    return sorted(named - have)


def calls_from_rows(
    rows: Sequence[Sequence[Any]],
    tokens: bool,
    decompressor: zstandard.ZstdDecompressor,
    bases: Sequence[Sequence[Any]] = (),
) -> list[CallRecord]:
    """The calls of ``rows`` (in their order), each delta row resolved against its base.

    A base must be among ``rows`` (read a call with its rollout's earlier calls) or
    ``bases`` (other rollouts' rows that ``rows`` name: :func:`foreign_bases`), which are
    resolved but not returned; ``tokens=False``: the id columns were NULL, and the calls
    have no ids.
    """
    n = len(rows)
    rows = [*rows, *bases] if bases else rows
    deltas = [Delta.from_json(r[_DELTA], r[0]) if r[_DELTA] is not None else None for r in rows]
    order = resolve_order([r[0] for r in rows], [d.base if d else None for d in deltas])
    # each resolved call's prompt + output ids, raw request and conversation
    full: dict[str, tuple[list[int], bytes, bytes]] = {}
    out: list[CallRecord | None] = [None] * len(rows)
    for i in order:
        row, delta = rows[i], deltas[i]
        prompt = decode_ids(row[5]) if tokens else []
        raw = decompressor.decompress(row[17]) if row[17] else b""
        conv = bytes(row[18]) if not isinstance(row[18], str) else row[18].encode()
        if delta is not None:
            base = full.get(delta.base)
            if base is None:
                raise StoreError(f"call {row[0]}: its base call {delta.base} is not stored")
            base_all, base_raw, base_conv = base
            if tokens:
                prompt = base_ids(base_all, delta.prompt_ids, row[0]) + prompt
            raw = splice(base_raw, delta.raw, raw, row[0])
            conv = splice(base_conv, delta.conversation, conv, row[0])
        call = _call(row, tokens, prompt, raw, conv)
        full[call.id] = (prompt + call.output_ids, raw, conv)
        out[i] = call
    return [c for c in out[:n] if c is not None]


def _call(
    row: Sequence[Any], tokens: bool, prompt: list[int], raw: bytes, conversation: bytes
) -> CallRecord:
    return CallRecord(
        id=row[0],
        rollout_id=row[1],
        seq=row[2],
        dialect=row[3],
        status=CallStatus(row[4]),
        prompt_ids=prompt,
        output_ids=decode_ids(row[6]) if tokens else [],
        output_logprobs=decode_logprobs(row[7]) if tokens else [],
        finish_reason=row[10],
        request_model=row[11],
        engine=row[12],
        served_model=row[13],
        weight_version=row[14],
        fork=bool(row[15]),
        render_info=orjson.loads(row[16]),
        raw_request=raw,
        conversation=orjson.loads(conversation),
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
