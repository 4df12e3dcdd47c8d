"""A private PostgreSQL cluster under a directory: for tests, benches and one-machine trials.

It runs the installed server binaries (Debian keeps them under
``/usr/lib/postgresql/<version>/bin``, off ``PATH``) with ``initdb`` and ``pg_ctl``, listens
on 127.0.0.1 only, and leaves no state outside its directory, so it needs no root and no
system service. PostgreSQL refuses to run as root: under root the cluster runs as the
``postgres`` user the Debian package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LocalCluster", "PostgresMissing", "server_bin"]


class PostgresMissing(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


def server_bin(name: str) -> str:
    """The path of a server binary (``initdb``, ``pg_ctl``), newest installed version first."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return candidate
    raise PostgresMissing(
        f"{name} not found: install PostgreSQL (Debian: apt-get install postgresql;"
        " scripts/setup.sh does)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class LocalCluster:
    """``initdb`` + ``pg_ctl start`` under ``root``; :meth:`stop` shuts it down (fast mode)."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = Path(root)
        self.data = self.root / "data"
        self.port = port or _free_port()
        self.user = "postgres"
        self._run_as: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresMissing(
                    "running as root needs the 'postgres' user (Debian's postgresql package)"
                ) from None
            self._run_as = ["runuser", "-u", "postgres", "--"]
            self._owner = (entry.pw_uid, entry.pw_gid)
        else:
            self.user = pwd.getpwuid(os.geteuid()).pw_name

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL of ``database`` in this cluster."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._run_as, *args], check=True, capture_output=True, text=True)

    def start(self) -> LocalCluster:
        """Create the cluster (first time) and start the server; returns once it accepts."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._run_as:
            os.chown(self.root, *self._owner)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                server_bin("initdb"), "-D", str(self.data), "-U", self.user,
                "--auth=trust", "--encoding=UTF8", "--no-sync",
            )  # fmt: skip
        # Unix sockets in the cluster's directory (never /var/run), TCP on loopback only;
        # enough connections for several gateway replicas and their readers.
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port}"
            f" -c unix_socket_directories={self.root} -c max_connections=200"
        )
        self._run(
            server_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "start",
        )  # fmt: skip
        return self

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server (open sessions are ended)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(server_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    @classmethod
    @contextlib.contextmanager
    def temporary(cls) -> Iterator[LocalCluster]:
        """A started cluster in a fresh temporary directory, stopped and removed on exit.

        The directory is made with :func:`tempfile.mkdtemp` (not under a per-user 0700
        tree such as pytest's), so the ``postgres`` user can reach it when run as root.
        """
        root = Path(tempfile.mkdtemp(prefix="openforge-pg-"))
        cluster = cls(root)
        try:
            yield cluster.start()
        finally:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
