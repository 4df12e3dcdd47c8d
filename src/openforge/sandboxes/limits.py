"""Resource limits for local sandboxes: a cgroup per sandbox where one can be made, rlimits else.

Root is exempt from ``RLIMIT_NPROC``, so a process limit needs the cgroup ``pids``
controller; ``RLIMIT_AS`` caps address space, not memory, and breaks runtimes that reserve
large virtual ranges (Node's V8), so it is only the fallback. Both cgroup v1 (one hierarchy
per controller) and v2 (unified) are handled. These are blocking file-system calls on
cgroupfs (microseconds each); callers run the slow parts (kill, remove) in a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Cgroup", "CgroupLayout", "detect_cgroups", "rlimit_args"]

_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("pids", "memory", "cpu")
_CPU_PERIOD_US = 100_000


@dataclass(slots=True)
class CgroupLayout:
    """Where per-sandbox cgroups are made: one parent per controller (v1) or one (v2)."""

    v2: bool
    parents: dict[str, Path] = field(default_factory=dict)

    @property
    def controllers(self) -> list[str]:
        return sorted(self.parents)


def _own_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for ctrl in ctrls.split(",") if ctrls else [""]:
                paths[ctrl] = path
    return paths


def _writable(parent: Path) -> bool:
    probe = parent / f"openforge-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def detect_cgroups() -> CgroupLayout | None:
    """The cgroup layout this process may create children in, or None."""
    own = _own_paths()
    if (_ROOT / "cgroup.controllers").exists():
        parent = _ROOT / own.get("", "/").lstrip("/")
        enabled = (parent / "cgroup.controllers").read_text().split()
        wanted = [c for c in _CONTROLLERS if c in enabled]
        try:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        except OSError:
            return None  # the "no internal processes" rule: our own group holds processes
        return CgroupLayout(True, dict.fromkeys(wanted, parent)) if _writable(parent) else None
    layout = CgroupLayout(False)
    for ctrl in _CONTROLLERS:
        mount = _ROOT / ctrl
        if not (mount / "cgroup.procs").exists():
            continue
        parent = mount / own.get(ctrl, "/").lstrip("/")
        if _writable(parent):
            layout.parents[ctrl] = parent
    return layout if layout.parents else None


class Cgroup:
    """One sandbox's cgroup(s): limits, the files a new process joins, kill and removal."""

    def __init__(self, layout: CgroupLayout, name: str) -> None:
        self.layout = layout
        self.dirs = {ctrl: parent / name for ctrl, parent in layout.parents.items()}

    def create(self, memory_mb: int | None, pids: int | None, cpu: float | None) -> None:
        """Make the group(s) and write the limits (raises OSError on failure)."""
        for d in set(self.dirs.values()):
            d.mkdir(exist_ok=True)
        v2 = self.layout.v2
        if pids is not None and "pids" in self.dirs:
            (self.dirs["pids"] / "pids.max").write_text(str(pids))
        if memory_mb is not None and "memory" in self.dirs:
            mem, limit = self.dirs["memory"], str(memory_mb * 1024 * 1024)
            (mem / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(limit)
            # Without a swap cap the limit only moves pages to swap.
            swap = mem / ("memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")
            with contextlib.suppress(OSError):
                swap.write_text("0" if v2 else limit)
        if cpu is not None and "cpu" in self.dirs:
            quota = max(1000, int(cpu * _CPU_PERIOD_US))
            c = self.dirs["cpu"]
            if v2:
                (c / "cpu.max").write_text(f"{quota} {_CPU_PERIOD_US}")
            else:
                (c / "cpu.cfs_period_us").write_text(str(_CPU_PERIOD_US))
                (c / "cpu.cfs_quota_us").write_text(str(quota))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a new process writes its pid to, to join."""
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def pids(self) -> set[int]:
        """Every process now in the group(s)."""
        found: set[int] = set()
        for f in self.procs_files:
            with contextlib.suppress(OSError):
                found |= {int(x) for x in Path(f).read_text().split()}
        return found

    def kill(self) -> None:
        """SIGKILL every process in the group(s), until none is left (bounded)."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the group(s); idempotent."""
        self.kill()
        for d in set(self.dirs.values()):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # a killed process is still being reaped


def rlimit_args(memory_mb: int | None, disk_mb: int | None, cpu_seconds: int | None) -> list[str]:
    """``prlimit`` arguments for the limits a cgroup does not cover."""
    args: list[str] = []
    if memory_mb is not None:
        args.append(f"--as={memory_mb * 1024 * 1024}")
    if disk_mb is not None:
        args.append(f"--fsize={disk_mb * 1024 * 1024}")
    if cpu_seconds is not None:
        args.append(f"--cpu={cpu_seconds}")
    return args
