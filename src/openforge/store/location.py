"""Opening a store by its location: a SQLite file path or a ``postgresql://`` URL."""

from __future__ import annotations

from pathlib import Path

from openforge.store.base import Store

__all__ = ["is_postgres_url", "open_store"]

_PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL database rather than a SQLite file."""
    return str(location).startswith(_PG_SCHEMES)


def open_store(location: str | Path, *, create: bool = True) -> Store:
    """The store at ``location``: ``postgresql://user@host/db`` or a SQLite file path.

    A SQLite file is created when absent unless ``create`` is false (then a missing file
    raises :class:`FileNotFoundError`); a PostgreSQL database must exist, and gets the
    schema on first open. psycopg is imported only for a PostgreSQL URL.
    """
    if is_postgres_url(location):
        from openforge.store.postgres import PostgresStore

        return PostgresStore(str(location))
    from openforge.store.sqlite import SqliteStore

    if not create and str(location) != ":memory:" and not Path(location).is_file():
        raise FileNotFoundError(f"no store at {location}")
    return SqliteStore(location)
