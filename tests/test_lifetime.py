"""Children tied to their parent end when it is SIGKILLed (real processes, Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

# The parent starts a child the way the gateway launcher does (a preexec hook) and a pool
# worker the way bench/learning.py does (an initializer), writes their pids, then waits.
PARENT = r"""
import multiprocessing, os, subprocess, sys, time
from concurrent.futures import ProcessPoolExecutor
from openforge.lifetime import end_with_parent, exit_with_parent

def worker_pid() -> int:
    return os.getpid()

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             preexec_fn=exit_with_parent(os.getpid()))
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=end_with_parent, initargs=(os.getpid(),))
    worker = pool.submit(worker_pid).result()
    pool.submit(time.sleep, 600)
    open(sys.argv[1], "w").write(f"{child.pid} {worker}")
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (dead, not yet reaped by init) counts as gone
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_children_end_when_the_parent_is_killed(tmp_path: Path) -> None:
    script, pids = tmp_path / "parent.py", tmp_path / "pids"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(pids)])
    deadline = time.monotonic() + 60
    while not (pids.exists() and pids.read_text()):
        assert parent.poll() is None and time.monotonic() < deadline, "the parent did not start"
        time.sleep(0.05)
    child, worker = (int(x) for x in pids.read_text().split())
    assert _alive(child) and _alive(worker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while (_alive(child) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the preexec-tied child outlived its parent"
    assert not _alive(worker), "the pool worker outlived its parent"
