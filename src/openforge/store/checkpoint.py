"""WAL checkpoints on their own thread, so a commit never waits for one.

SQLite in WAL mode appends each commit to the ``-wal`` file and, by default, the
connection that commits the 1000th page also *checkpoints*: it copies the WAL back into
the database file and fsyncs it, inside that commit. With ``synchronous=NORMAL`` that
checkpoint is the only fsync a writer ever does, and it lands on whichever call happened
to cross the threshold: measured on the gateway bench (256 paced streams), it put the
commit wait's p99 at 10.6 ms against 4.4 ms without it. Here the writer turns automatic
checkpoints off and a :class:`WalCheckpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)``
from a second connection on its own thread, after every ``every_writes`` writes or
``idle_s`` seconds after the last one. A passive checkpoint never blocks the writer or
readers.

The WAL restarts from its beginning only on a commit that begins when every frame in it
has been copied back. Under steady traffic a passive checkpoint never gets there: the
commits made while it copies are left over, so the next commit appends, and the WAL grew
without bound (280 MB beside a 46 MB database after one c=1 JSON run of bench/gateway.py,
about 6,000 calls; each commit looks pages up in a WAL index that grows with it). So
once the WAL holds ``restart_frames`` frames, the checkpointer copies what is left with
the store's writes held back (``writes``, the lock every write of this process holds):
only the frames written during the first pass, so the hold is short (7-10 ms measured
under back-to-back writes; once per 768 calls in a trace of the store alone, where 4,096
frames are three rounds of 256 writes), and the next commit restarts the WAL. A
reader still on an older snapshot can keep it from completing; the next round tries again.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

__all__ = ["WalCheckpointer"]

_log = logging.getLogger(__name__)


class WalCheckpointer:
    """Checkpoint the WAL of the database at ``path`` in the background."""

    def __init__(
        self,
        path: str,
        writes: threading.Lock,
        every_writes: int = 256,
        idle_s: float = 1.0,
        restart_frames: int = 4096,
    ) -> None:
        self.path = path
        self.every_writes = every_writes
        self.idle_s = idle_s
        self.restart_frames = restart_frames  # 16 MB of 4 KB pages
        self.checkpoints = 0
        self.catch_ups = 0  # checkpoints finished with the writes held back (tests, benches)
        self._writes = writes
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._pending = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="store-checkpoint", daemon=True)
        self._thread.start()

    def wrote(self, n: int) -> None:
        """Count ``n`` committed writes; wake the checkpointer once enough have piled up."""
        with self._lock:
            self._pending += n
            due = self._pending >= self.every_writes
        if due:
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.idle_s)
            self._wake.clear()
            with self._lock:
                pending, self._pending = self._pending, 0
            if pending:
                self.checkpoint()
            if self._stopping:
                return

    def checkpoint(self) -> None:
        """One passive checkpoint now (on the calling thread); finished with the writes
        held back when the WAL has grown to ``restart_frames``."""
        try:
            _, frames, _ = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if frames >= self.restart_frames:
                with self._writes:
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.catch_ups += 1
            self.checkpoints += 1
        except sqlite3.Error as exc:  # busy or I/O: the next round retries
            _log.warning("store %s: WAL checkpoint failed: %s", self.path, exc)

    def close(self) -> None:
        """Checkpoint what is left, stop the thread, close the connection."""
        self._stopping = True
        with self._lock:
            self._pending += 1  # one last round, so a closed store leaves a short WAL
        self._wake.set()
        self._thread.join()
        self._conn.close()
