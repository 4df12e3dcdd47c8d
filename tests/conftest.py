"""Fixtures shared across test packages: a real PostgreSQL server for the store tests.

A private cluster (initdb + pg_ctl under a temporary directory, 127.0.0.1 only) starts
once per session when a test asks for it; ``OPENFORGE_TEST_POSTGRES`` may name a running
server instead (a ``postgresql://`` URL of a database the tests may create others from).
PostgreSQL is installed by scripts/setup.sh: a missing server fails the test.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from openforge.store.pgcluster import LocalCluster


class PostgresServer:
    """Makes a fresh database per test on one server."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def new_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return urlsplit(self.admin_url)._replace(path="/" + name).geturl()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (a private cluster unless one is named)."""
    given = os.environ.get("OPENFORGE_TEST_POSTGRES")
    if given:
        yield PostgresServer(given)
        return
    with LocalCluster.temporary() as cluster:
        yield PostgresServer(cluster.url())


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty PostgreSQL database for one test."""
    return postgres_server.new_database()
