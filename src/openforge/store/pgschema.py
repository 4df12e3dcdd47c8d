"""The PostgreSQL store's schema: its DDL, its version, and the check made on opening."""

from __future__ import annotations

import psycopg

from openforge.store.errors import StoreError
from openforge.store.migrations import SchemaMismatch
from openforge.store.rows import tables_ddl

__all__ = [
    "CONNECT_TIMEOUT_S",
    "PG_SCHEMA_VERSION",
    "check_schema",
    "connect_error",
    "connect_reason",
    "redact",
    "with_timeout",
]

# Seconds a connection waits for the server unless the URL says (libpq's
# ``connect_timeout``): a host that silently drops packets would otherwise hold a command
# for the operating system's TCP timeout, minutes, before it could say anything.
CONNECT_TIMEOUT_S = 10

PG_SCHEMA_VERSION = 5
# Version 2: ``calls.role`` and ``role_keys`` (judge and simulated-user keys). An older
# store is brought up in place on open (under the advisory lock, in one transaction).
_ROLES = """
ALTER TABLE calls ADD COLUMN IF NOT EXISTS role TEXT NOT NULL DEFAULT 'policy';
CREATE TABLE IF NOT EXISTS role_keys (
    key TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL REFERENCES rollouts(id),
    role TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS role_keys_rollout ON role_keys(rollout_id);
"""
# Version 3: ``calls.delta``, a call stored relative to an earlier call of its rollout
# (store/delta.py); rows from before are whole (NULL).
_DELTA = "ALTER TABLE calls ADD COLUMN IF NOT EXISTS delta BYTEA;"
# Version 4: ``rollouts.flags``, the reward-hack monitor's findings (traces/monitor.py) as a
# JSON list; rollouts from before have none.
_FLAGS = "ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS flags BYTEA NOT NULL DEFAULT '[]'::bytea;"
# Version 5: ``rollouts.run_id`` and ``rollouts.split`` (the run that made a rollout, its
# task's split); ``run_id`` filled from the metadata the orchestrator wrote, splits unknown.
_RUNS_SPLITS = """
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS run_id TEXT;
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS split TEXT;
CREATE INDEX IF NOT EXISTS rollouts_run ON rollouts(run_id);
"""
_RUNS_BACKFILL = """
UPDATE rollouts SET run_id = convert_from(metadata, 'UTF8')::jsonb ->> 'run_id'
WHERE run_id IS NULL AND jsonb_typeof(convert_from(metadata, 'UTF8')::jsonb -> 'run_id') = 'string';
"""
_LOCK_ID = 0x0F0F_5C4E  # advisory lock: replicas starting together create the schema once

# Content-addressed images calls refer to by sha256. Added to version 1 as a new table
# (created on open when missing), so a version-1 store from before it opens unchanged.
_BLOBS = """
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    data BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
"""

_SCHEMA = (
    tables_ddl(
        real="DOUBLE PRECISION",
        blob="BYTEA",
        json="BYTEA",
        # ``n`` orders listings; ``next_seq`` is the counter allocate_seq moves on.
        rollouts_first="    n BIGSERIAL,\n",
        rollouts_more="    next_seq INTEGER NOT NULL DEFAULT 0,\n",
    )
    + _BLOBS
    + _ROLES
)


def check_schema(url: str) -> None:
    """Create the schema in an empty database, accept ours, refuse any other version."""
    try:
        conn = psycopg.connect(with_timeout(url), autocommit=True)
    except psycopg.Error as exc:
        raise connect_error(url, exc) from None
    with conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
        exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
        if exists is None or not exists[0]:
            if conn.execute("SELECT to_regclass('calls') IS NOT NULL").fetchone() == (True,):
                raise SchemaMismatch(f"{redact(url)} is not an OpenForge store (no version)")
            conn.execute(_SCHEMA)
            conn.execute("INSERT INTO schema_version VALUES (%s)", (PG_SCHEMA_VERSION,))
            return
        row = conn.execute("SELECT version FROM schema_version").fetchone()
        version = row[0] if row else None
        if version in (1, 2, 3, 4):
            conn.execute(_BLOBS)
            conn.execute(_ROLES)
            conn.execute(_DELTA)
            conn.execute(_FLAGS)
            conn.execute(_RUNS_SPLITS)
            conn.execute(_RUNS_BACKFILL)
            conn.execute("UPDATE schema_version SET version = %s", (PG_SCHEMA_VERSION,))
            return
        if version != PG_SCHEMA_VERSION:
            newer = version is not None and version > PG_SCHEMA_VERSION
            raise SchemaMismatch(
                f"store {redact(url)} has schema version {version}, this OpenForge reads"
                f" {PG_SCHEMA_VERSION}"
                + ("; it is newer than this OpenForge: upgrade OpenForge" if newer else "")
            )
        conn.execute(_BLOBS)


def with_timeout(url: str) -> str:
    """``url`` as a connection string with :data:`CONNECT_TIMEOUT_S` as its
    ``connect_timeout`` unless it sets one (``?connect_timeout=SECONDS``)."""
    try:
        if psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout"):
            return url
        return psycopg.conninfo.make_conninfo(url, connect_timeout=str(CONNECT_TIMEOUT_S))
    except psycopg.ProgrammingError:
        return url  # psycopg's own connect says what is wrong with the URL


def connect_reason(url: str, exc: BaseException) -> str:
    """Why a connection to ``url`` failed, on one line; a timeout says how long it waited
    and how to wait longer."""
    reason = " ".join(str(exc).split())
    if not isinstance(exc, psycopg.errors.ConnectionTimeout | TimeoutError):
        return reason
    try:
        waited = psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout")
    except psycopg.ProgrammingError:
        waited = None
    return (
        f"no answer within {waited or CONNECT_TIMEOUT_S} s ({reason}); check that the host is "
        "reachable, or give it longer with connect_timeout=SECONDS in the URL "
        "(postgresql://...?connect_timeout=30)"
    )


def connect_error(url: str, exc: BaseException) -> StoreError:
    """The error for a failed connection to the store at ``url``, its password masked."""
    return StoreError(f"cannot connect to the store at {redact(url)}: {connect_reason(url, exc)}")


def redact(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable postgresql URL>"
    host, port, db = info.get("host", ""), info.get("port", ""), info.get("dbname", "")
    return f"postgresql://{info.get('user', '')}@{host}{':' + str(port) if port else ''}/{db}"
