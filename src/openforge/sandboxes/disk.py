"""A size-limited filesystem per local sandbox: a sparse ext4 image, loop-mounted.

The sandbox's writable places (workspace, HOME, /tmp) live on it, so everything the sandbox
writes counts against one total; past it, writes fail with ``ENOSPC`` and the host's disk
holds at most the image's size. A tmpfs would be quicker to make but its pages are memory,
charged to the sandbox's memory cgroup: a disk-heavy task would be OOM-killed instead of
seeing a full disk. The image is sparse (it costs what is written) and has no journal
(nothing in it outlives the sandbox).

The sandbox's processes run as an unprivileged host uid; a reserve of blocks only root may
use is kept on top of the limit, so the orchestrator (root) can still put the verifier's
files into a sandbox whose agent filled its disk: the agent's failure, scored, never an
infrastructure error. Making one needs root (``mount``) and loop devices; callers check
:func:`loop_disks_available` first. Blocking calls (``mkfs``, ``mount``): run in a thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["DiskError", "loop_disks_available", "make_disk", "remove_disk"]

# Blocks only root may use (the orchestrator's puts after the agent filled the disk), on
# top of the limit; a disk smaller than this reserves its own size.
RESERVE_MB = 32


class DiskError(OSError):
    """The sandbox's filesystem could not be made or removed."""


def loop_disks_available() -> bool:
    """Whether this process can make loop-mounted ext4 disks (root, loop devices, mkfs)."""
    return (
        os.geteuid() == 0
        and os.path.exists("/dev/loop-control")
        and shutil.which("mkfs.ext4") is not None
        and shutil.which("mount") is not None
    )


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise DiskError(f"{argv[0]} failed ({res.returncode}): {res.stderr.strip()}")


def make_disk(image: Path, mountpoint: Path, size_mb: int, owner: tuple[int, int]) -> None:
    """Make a ``size_mb`` filesystem at ``mountpoint``, its root owned by ``owner``."""
    reserve = min(RESERVE_MB, size_mb)  # mkfs reserves at most half
    total = size_mb + reserve
    with open(image, "wb") as fh:
        fh.truncate(total * 1024 * 1024)
    uid, gid = owner
    _run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            f"{100 * reserve / total:.3f}",
            "-O",
            "^has_journal",
            "-E",
            f"lazy_itable_init=1,nodiscard,root_owner={uid}:{gid}",
            str(image),
        ]
    )
    mountpoint.mkdir()
    # noinit_itable: no kernel thread zeroing inode tables of a filesystem that lives minutes.
    _run(["mount", "-o", "loop,noinit_itable,nosuid,nodev", str(image), str(mountpoint)])


def remove_disk(mountpoint: Path) -> None:
    """Unmount ``mountpoint`` (lazily if still busy); the loop device goes with it."""
    if not os.path.ismount(mountpoint):
        return
    res = subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False)
    if res.returncode != 0 and os.path.ismount(mountpoint):
        # A process of the sandbox not yet reaped holds it: detach now, freed when it dies.
        _run(["umount", "--lazy", str(mountpoint)])
