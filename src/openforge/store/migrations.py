"""Store schema versions and the migrations between them.

A store file records its schema version in ``schema_version``. Opening a store:

* an empty file gets the current schema;
* the current version opens as is;
* an older version that every step up to the current one has a migration for is backed up
  (SQLite's online backup, to ``<file>.v<old>.bak``) and then migrated in one transaction:
  either every step and the new version number land, or nothing does;
* anything else — a newer version, an older one with a missing step, a file that is not
  an OpenForge store — is refused with :class:`SchemaMismatch`, whose message says what
  to do. A store that cannot be backed up is refused rather than migrated unprotected.

Adding a version: bump :data:`SCHEMA_VERSION`, update the DDL in ``sqlite.py`` (which
creates fresh stores at the current version), and add ``MIGRATIONS[new] = Migration(...)``
whose ``apply`` turns a store of version ``new - 1`` into ``new``. Migrations run on the
opening connection inside ``BEGIN IMMEDIATE`` and must not commit.

History:

* v1 — rollouts and calls (the first released schema).
* v2 — ``calls.response_id`` (the id of the answer a harness saw, e.g. ``resp_…``) with an
  index, so OpenAI Responses ``previous_response_id`` survives a gateway restart.
* v3 — ``blobs``: content-addressed bytes (images sent in calls), keyed by sha256, so a
  screenshot a rollout re-sends on every call is stored once.
* v4 — ``calls.role`` (policy, teacher, judge, user; existing calls are ``policy``) and
  ``role_keys``: the extra keys a rollout's judge and simulated user call with.
* v5 — ``calls.delta``: a call stored relative to an earlier call of its rollout
  (:mod:`openforge.store.delta`); existing rows are whole (NULL).
* v6 — ``calls_mark_running``: a trigger moving a ``created`` rollout to ``running`` when
  a call of it is inserted, so a group of recorded calls is one ``INSERT`` statement even
  when some are their rollouts' first (see :mod:`openforge.store.writer`).
* v7 — ``rollouts.flags``: what the reward-hack monitor (:mod:`openforge.traces.monitor`)
  found in a rollout, a JSON list; existing rollouts have none (``[]``).
* v8 — ``rollouts.run_id`` and ``rollouts.split``: the orchestrator run that made a rollout
  and its task's split, so readers take training rollouts only. ``run_id`` is filled from
  the metadata the orchestrator already wrote; no store recorded splits before: NULL.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from openforge.store.errors import StoreError

__all__ = [
    "BLOBS_DDL",
    "MARK_RUNNING_DDL",
    "MIGRATIONS",
    "ROLE_KEYS_DDL",
    "SCHEMA_VERSION",
    "Migration",
    "SchemaMismatch",
    "migrate",
]

SCHEMA_VERSION = 8


class SchemaMismatch(StoreError):
    """The file was written by another schema version than this code reads."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One step: turns a store of version ``to - 1`` into version ``to``."""

    to: int
    description: str
    apply: Callable[[sqlite3.Connection], None]


def _v2_response_id(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE calls ADD COLUMN response_id TEXT")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS calls_response ON calls(response_id)"
        " WHERE response_id IS NOT NULL"
    )


BLOBS_DDL = """
CREATE TABLE IF NOT EXISTS blobs (
    sha256 TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    created_at REAL NOT NULL
);
"""


def _v3_blobs(conn: sqlite3.Connection) -> None:
    conn.execute(BLOBS_DDL)


ROLE_KEYS_DDL = """
CREATE TABLE IF NOT EXISTS role_keys (
    key TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL REFERENCES rollouts(id),
    role TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS role_keys_rollout ON role_keys(rollout_id);
"""


def _v4_roles(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE calls ADD COLUMN role TEXT NOT NULL DEFAULT 'policy'")
    for statement in ROLE_KEYS_DDL.split(";"):
        if statement.strip():
            conn.execute(statement)


def _v5_delta(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE calls ADD COLUMN delta TEXT")


# Inside the INSERT itself: no UPDATE statement (nor the transaction around the two) per
# group of calls; the lookup by primary key costs far less than a statement.
MARK_RUNNING_DDL = """
CREATE TRIGGER IF NOT EXISTS calls_mark_running AFTER INSERT ON calls
BEGIN
    UPDATE rollouts SET status = 'running' WHERE id = NEW.rollout_id AND status = 'created';
END;
"""


def _v6_mark_running(conn: sqlite3.Connection) -> None:
    conn.execute(MARK_RUNNING_DDL)


def _v7_flags(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE rollouts ADD COLUMN flags TEXT NOT NULL DEFAULT '[]'")


def _v8_runs_splits(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE rollouts ADD COLUMN run_id TEXT")
    conn.execute("ALTER TABLE rollouts ADD COLUMN split TEXT")
    conn.execute(
        "UPDATE rollouts SET run_id = json_extract(CAST(metadata AS TEXT), '$.run_id')"
        " WHERE json_valid(CAST(metadata AS TEXT))"
        " AND json_type(CAST(metadata AS TEXT), '$.run_id') = 'text'"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS rollouts_run ON rollouts(run_id)")


MIGRATIONS: dict[int, Migration] = {
    2: Migration(2, "calls.response_id for previous_response_id after restarts", _v2_response_id),
    3: Migration(3, "blobs: content-addressed images, stored once", _v3_blobs),
    4: Migration(4, "calls.role and role_keys: judge and simulated-user calls", _v4_roles),
    5: Migration(5, "calls.delta: calls stored relative to an earlier call", _v5_delta),
    6: Migration(6, "calls_mark_running: an insert marks its rollout running", _v6_mark_running),
    7: Migration(7, "rollouts.flags: the reward-hack monitor's findings", _v7_flags),
    8: Migration(8, "rollouts.run_id and rollouts.split: runs and held-out data", _v8_runs_splits),
}


def read_version(conn: sqlite3.Connection, path: str) -> int | None:
    """The file's schema version; None for an empty file. Refuses non-OpenForge files."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables:
        return None
    if "schema_version" not in tables:
        raise SchemaMismatch(
            f"{path} is an SQLite file but not an OpenForge store (no schema_version table)"
        )
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def _steps(found: int, path: str) -> list[Migration]:
    if found > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"store {path} has schema version {found}, newer than this OpenForge reads "
            f"({SCHEMA_VERSION}); upgrade openforge to open it"
        )
    missing = [v for v in range(found + 1, SCHEMA_VERSION + 1) if v not in MIGRATIONS]
    if missing:
        raise SchemaMismatch(
            f"store {path} has schema version {found} and no migration to "
            f"{SCHEMA_VERSION} exists (none to version {missing[0]}); export it with the "
            "OpenForge that wrote it"
        )
    return [MIGRATIONS[v] for v in range(found + 1, SCHEMA_VERSION + 1)]


def _backup(conn: sqlite3.Connection, path: str, found: int) -> str | None:
    """Copy the store (consistently, WAL included) next to it before touching it."""
    if path == ":memory:" or path.startswith("file::memory:"):
        return None
    target = Path(f"{path}.v{found}.bak")
    n = 1
    while target.exists():
        target = Path(f"{path}.v{found}.bak{n}")
        n += 1
    try:
        dest = sqlite3.connect(target)
        try:
            conn.backup(dest)
        finally:
            dest.close()
    except (sqlite3.Error, OSError) as exc:
        target.unlink(missing_ok=True)
        raise SchemaMismatch(
            f"store {path} has schema version {found} and needs migrating to "
            f"{SCHEMA_VERSION}, but backing it up to {target} failed ({exc}); free space or "
            "make the directory writable and open it again (the store is unchanged)"
        ) from None
    return str(target)


def migrate(conn: sqlite3.Connection, path: str, found: int) -> str | None:
    """Bring a store of version ``found`` to :data:`SCHEMA_VERSION`; return the backup's path.

    ``conn`` is in autocommit mode (``isolation_level=None``). Raises
    :class:`SchemaMismatch` when there is no way up, the backup fails, or a step fails
    (then the store is left exactly as it was).
    """
    steps = _steps(found, path)
    if not steps:
        return None
    backup = _backup(conn, path, found)
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have migrated it between our read and our lock.
        now = read_version(conn, path)
        if now != found:
            conn.execute("ROLLBACK")
            if now == SCHEMA_VERSION:
                return backup
            raise SchemaMismatch(f"store {path} changed version to {now} while opening")
        for step in steps:
            step.apply(conn)
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
        if conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 0:
            conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except SchemaMismatch:
        raise
    except Exception as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        where = f"; a copy from before is at {backup}" if backup else ""
        raise SchemaMismatch(
            f"store {path}: migrating schema {found} → {SCHEMA_VERSION} failed ({exc}); "
            f"the store is unchanged{where}"
        ) from exc
    return backup
