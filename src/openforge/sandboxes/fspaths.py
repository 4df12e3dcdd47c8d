"""Map sandbox paths onto a host directory, refusing every way out of it.

A sandbox path is relative (to the workdir), absolute under one of the sandbox's writable
roots (the workdir, ``~`` = the sandbox's HOME), or ``~/…``. ``..`` components are refused
outright; symlinks are resolved and must stay under the root they started in. These checks
are blocking file-system calls: callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from openforge.sandboxes.base import SandboxError

__all__ = ["PathEscape", "read_files", "resolve", "write_files"]


class PathEscape(SandboxError):
    """A path points outside the sandbox's writable roots."""


def _split(path: str, roots: Mapping[str, Path], workdir: str, home: str) -> tuple[Path, str]:
    if not path or "\x00" in path:
        raise PathEscape(f"invalid path {path!r}")
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    pure = PurePosixPath(path)
    if ".." in pure.parts:
        raise PathEscape(f"path {path!r} contains '..'")
    if not pure.is_absolute():
        pure = PurePosixPath(workdir) / pure
    # Longest root first so /workspace/x never matches a shorter root by accident.
    for inside in sorted(roots, key=len, reverse=True):
        try:
            rel = pure.relative_to(inside)
        except ValueError:
            continue
        return roots[inside], str(rel)
    raise PathEscape(f"path {path!r} is outside the sandbox's roots {sorted(roots)}")


def resolve(
    path: str, roots: Mapping[str, Path], workdir: str, home: str, *, must_exist: bool
) -> Path:
    """The host path for sandbox ``path``; raise :class:`PathEscape` if it leaves its root."""
    root, rel = _split(path, roots, workdir, home)
    host = root / rel
    real_root = root.resolve()
    # For writes the file and its parents may not exist yet: the deepest existing
    # ancestor must resolve inside the root (so mkdir never follows a link out).
    probe = host if must_exist else host.parent
    while not must_exist and not probe.exists() and probe != root:
        probe = probe.parent
    real = probe.resolve()
    if real != real_root and real_root not in real.parents:
        raise PathEscape(f"path {path!r} leads outside the sandbox (via a symlink)")
    if not must_exist and host.is_symlink():
        raise PathEscape(f"path {path!r} is a symlink; refusing to write through it")
    return host


def _mkdirs(d: Path, owner: tuple[int, int] | None) -> None:
    missing: list[Path] = []
    while not d.exists():
        missing.append(d)
        d = d.parent
    for m in reversed(missing):
        with contextlib.suppress(FileExistsError):
            m.mkdir()
            if owner is not None:
                os.chown(m, *owner, follow_symlinks=False)


def write_files(
    files: Mapping[str, bytes],
    roots: Mapping[str, Path],
    workdir: str,
    home: str,
    owner: tuple[int, int] | None = None,
) -> None:
    """Write each file, creating parent directories; never follows a final symlink.

    ``owner`` (uid, gid): what the sandbox runs as on the host; new files and directories
    are given to it, so the sandbox may change what it was handed.
    """
    for path, data in files.items():
        host = resolve(path, roots, workdir, home, must_exist=False)
        _mkdirs(host.parent, owner)
        # Re-check: a directory the sandbox swapped for a link since the first check.
        host = resolve(path, roots, workdir, home, must_exist=False)
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            if owner is not None:
                os.fchown(fh.fileno(), *owner)
            fh.write(data)


def read_files(
    paths: Sequence[str], roots: Mapping[str, Path], workdir: str, home: str
) -> dict[str, bytes]:
    """Read each regular file; missing paths (and directories) are absent from the result."""
    found: dict[str, bytes] = {}
    for path in paths:
        try:
            host = resolve(path, roots, workdir, home, must_exist=True)
            with open(host, "rb") as fh:
                found[path] = fh.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
    return found
