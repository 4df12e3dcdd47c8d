"""Run a verifier where what the agent left behind cannot steer it (``Sandbox.exec_verifier``).

Every backend does the same, in this order, after the agent's turn:

1. **Kill every process the agent left** (a background job racing the finish, a process
   waiting to kill or stall the verifier).
2. **Undo what the agent did to the verifier's paths**: the workdir gets its mode back
   (``chmod 000 /workspace``); whatever stands where the verifier's directory goes (a
   symlink, a file, a directory with planted ``json.py``) is removed and the directory made
   anew, owned by the backend and read-only to the verifier, then its files written. The
   run area :data:`VERIFIER_RUN` is made anew the same way: ``bin/`` (the ``python3`` that
   runs isolated, :mod:`verifier_python`), ``home/`` (``$HOME``: never the agent's),
   ``tmp/`` (``$TMPDIR``) and ``chan/reward``, the reward channel.
3. **Run as a uid the agent is not** where the backend can: the workdir and the agent's home
   are handed to the verifier's uid for the run (it may read what the agent hid from others
   and write as tests do) and handed back after; the environment is built from nothing (no
   ``PYTHON*``, ``LD_*`` or ``PATH`` of the agent's).
4. **Read the reward from the channel only**: a FIFO that the backend opened for reading
   before the run; ``openforge_verify`` opens it for writing at import, removes its name
   (so no later process, such as the agent's code that a verifier runs, can open it) and
   makes its own process undumpable (so a same-uid child cannot reach its descriptors
   through /proc). What the verifier prints is kept for people, bounded.

This module is shared by the local backend (on host paths) and by sandboxd (inside a
container or pod), so it uses the standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from openforge.sandboxes.runs import VERIFIER_MAX_OUTPUT, VerifierExec, VerifierRun

__all__ = [
    "CHANNEL_ENV",
    "CHANNEL_MAX",
    "CONTAINER_VERIFIER_IDS",
    "VERIFIER_MAX_OUTPUT",
    "VERIFIER_RUN",
    "RunArea",
    "VerifierExec",
    "VerifierRun",
    "clear_path",
    "hand_over",
    "make_fresh_tree",
    "make_run_area",
    "make_verify_dir",
    "read_channel",
    "read_outputs",
    "restore_dir_mode",
]

# Where the verifier's run area appears inside the sandbox.
VERIFIER_RUN = "/run/openforge-verifier"
# The reward channel's path, for openforge_verify (which removes the name once open).
CHANNEL_ENV = "OPENFORGE_REWARD_CHANNEL"
CHANNEL_MAX = 1024 * 1024  # bytes of channel read; a reward line is far less
# The uid and gid a verifier runs as in a container or pod, where the agent is root (the
# distroless "nonroot" id: no account of any usual image has it).
CONTAINER_VERIFIER_IDS = (65532, 65532)
_BOOT = Path(__file__).with_name("verifier_python.py")
_F_SETPIPE_SZ = 1031


def clear_path(path: Path) -> str | None:
    """Remove whatever is at ``path`` (never following a symlink); a note when there was
    something."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
        return f"removed the directory the agent left at {path.name}"
    path.unlink()
    kind = "symlink" if stat.S_ISLNK(st.st_mode) else "file"
    return f"removed the {kind} the agent left at {path.name}"


def restore_dir_mode(path: Path, mode: int = 0o755) -> str | None:
    """Give the directory ``path`` (not a symlink: the backend's own mount) at least
    ``mode``; a note when it had less."""
    st = path.lstat()
    if stat.S_IMODE(st.st_mode) & mode != mode:
        os.chmod(path, stat.S_IMODE(st.st_mode) | mode)
        return f"restored the mode of {path} (was {stat.S_IMODE(st.st_mode):o})"
    return None


def _write_tree(root: Path, files: Mapping[str, bytes], owner: tuple[int, int] | None) -> None:
    for rel, data in files.items():
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"verifier file path must be relative and inside: {rel!r}")
        target = root.joinpath(*parts)
        for d in reversed(target.parents):
            if d == root or root not in d.parents:
                continue
            if not d.exists():
                d.mkdir(mode=0o755)
                if owner is not None:
                    os.chown(d, *owner)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            if owner is not None:
                os.fchown(fh.fileno(), *owner)
            fh.write(data)


def make_verify_dir(path: Path, files: Mapping[str, bytes]) -> list[str]:
    """Make ``path`` anew (whatever was there removed) holding ``files``, owned by the
    caller and read-only to everyone else; the notes on what was removed."""
    notes = [n for n in (clear_path(path),) if n]
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)  # whatever the umask
    _write_tree(path, files, None)
    return notes


def make_fresh_tree(path: Path, files: Mapping[str, bytes], owner: tuple[int, int] | None) -> None:
    """A fresh directory ``path`` holding ``files``, all given to ``owner``."""
    clear_path(path)
    path.mkdir(mode=0o755)
    if owner is not None:
        os.chown(path, *owner)
    _write_tree(path, files, owner)


@dataclass(frozen=True, slots=True)
class RunArea:
    """The run area on the caller's side (``root``), and the channel's read end."""

    root: Path
    channel_fd: int

    def env(self, inside: str = VERIFIER_RUN) -> dict[str, str]:
        """The variables that point the verifier at the run area (``inside``: its path there)."""
        return {
            "HOME": f"{inside}/home",
            "TMPDIR": f"{inside}/tmp",
            CHANNEL_ENV: f"{inside}/chan/reward",
        }


def make_run_area(
    root: Path, python: str | None, owner: tuple[int, int] | None, inside: str = VERIFIER_RUN
) -> RunArea:
    """Make the run area at ``root`` anew (seen as ``inside`` by the verifier): ``bin/``
    with the isolated ``python3`` (when there is a ``python``), and ``home/``, ``tmp/`` and
    ``chan/reward`` for ``owner``. Opens the channel's read end (the caller closes it with
    :func:`read_channel`)."""
    clear_path(root)
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    bin_dir = root / "bin"
    bin_dir.mkdir(mode=0o755)
    if python is not None:
        (bin_dir / "boot.py").write_bytes(_BOOT.read_bytes())
        shim = f'#!/bin/sh\nexec {shlex.quote(python)} -I {inside}/bin/boot.py "$@"\n'
        for name in ("python3", "python"):
            (bin_dir / name).write_text(shim)
            os.chmod(bin_dir / name, 0o755)
    for sub, mode in (("home", 0o700), ("tmp", 0o1777), ("chan", 0o700)):
        (root / sub).mkdir()
        os.chmod(root / sub, mode)
        if owner is not None:
            os.chown(root / sub, *owner)
    fifo = root / "chan" / "reward"
    os.mkfifo(fifo, 0o600)
    if owner is not None:
        os.chown(fifo, *owner)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, CHANNEL_MAX)  # a verifier's write never blocks
    return RunArea(root, fd)


def read_channel(fd: int) -> bytes:
    """What is waiting on the channel (at most :data:`CHANNEL_MAX` bytes); closes ``fd``."""
    data = bytearray()
    try:
        while len(data) < CHANNEL_MAX:
            try:
                chunk = os.read(fd, CHANNEL_MAX - len(data))
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return bytes(data)


def hand_over(path: Path, owner: tuple[int, int]) -> None:
    """Give ``path`` and everything under it (symlinks themselves, never their targets) to
    ``owner``; set-id bits are dropped on the way, as chown does."""
    os.lchown(path, *owner)
    for top, dirs, files in os.walk(path, followlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.lchown(os.path.join(top, name), *owner)


def read_outputs(path: Path) -> dict[str, bytes]:
    """The regular files under ``path`` (relative names), :data:`CHANNEL_MAX` bytes in all."""
    found: dict[str, bytes] = {}
    budget = CHANNEL_MAX
    for top, _, files in os.walk(path, followlinks=False):
        for name in sorted(files):
            p = Path(top) / name
            with contextlib.suppress(OSError):
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as fh:
                    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                        continue
                    data = fh.read(budget)
                budget -= len(data)
                found[str(p.relative_to(path))] = data
            if budget <= 0:
                return found
    return found
