"""A harness's host install made portable: one self-contained directory for container sandboxes.

A task's own image (a Harbor Dockerfile, left unedited) has no Node, no Claude Code and
perhaps a C library of another version. So the install the local backend uses (``/usr/bin``,
``/opt/openforge``) is copied, once per version, into a directory laid out to be shown
read-only at :data:`HARNESS_DIR` in any container — podman bind-mounts it, Kubernetes mounts
the image built from it (``openforge images build --harness``) — and brings everything it
runs on:

- ``lib/``: the dynamic loader and every shared library the install's ELF files need (the
  closure ``ldd`` reports on this host);
- ELF programs (``node``, ``python3.11``) copied with their interpreter and ``DT_RPATH`` set
  to ``lib/`` (``patchelf``), so they and every child they spawn of themselves run on the
  bundled libraries whatever the image has, and ``/proc/self/exe`` stays the program;
- programs ``patchelf`` would break (Claude Code is a Bun single-file executable whose
  payload sits past the ELF image) started through the bundled loader by a script;
- static programs (Codex's musl binary and its ``rg``) and package trees (hard links when
  on the same file system, else copies);
- ``bin/``: the harness's own entry point and nothing else, prepended to ``PATH`` in the
  adapter's env file (``launching.path_line``), so what the agent's commands find on ``PATH``
  stays the task's.

Commands the harness runs (the agent's shell) are the image's own: no ``LD_LIBRARY_PATH``
or loader setting reaches them. The directory is cached under
``$OPENFORGE_HOME/harnesses/<name>-<version>-<hash>``; the hash covers the recipe and the
size and mtime of every source, so reinstalling a harness makes a new one.

Exceptions: :class:`~openforge.harnesses.base.HarnessError` when a source is missing or
``patchelf`` is not installed (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from openforge.harnesses.base import HarnessError
from openforge.home import openforge_home
from openforge.sandboxes.base import HARNESS_DIR, HarnessInstall

__all__ = [
    "HARNESS_BIN",
    "HARNESS_DIR",
    "Portable",
    "Recipe",
    "build_portable",
    "install_for",
    "loader_script",
    "portable_dir",
]

HARNESS_BIN = f"{HARNESS_DIR}/bin"
_LIB = f"{HARNESS_DIR}/lib"
_LOADER = "ld-linux-x86-64.so.2"
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x")


@dataclass(frozen=True, slots=True)
class Recipe:
    """What a portable install holds; every key is a path relative to :data:`HARNESS_DIR`.

    ``trees``: package directories (hard-linked or copied). ``patched``: dynamically linked
    programs, retargeted at ``lib/``. ``loaded``: programs started through the bundled
    loader by the script at the same key under ``bin/`` (``loaded_entry``). ``static``:
    files copied as they are. ``scripts``: small executable files (mode 755); ``texts``:
    small data files (mode 644). ``links``: symbolic links (key → target).
    """

    name: str
    version: str
    trees: dict[str, str] = field(default_factory=dict)
    patched: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, str] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)

    def sources(self) -> list[str]:
        """Every host path the install is made of."""
        return [*self.trees.values(), *self.patched.values(), *self.loaded.values(),
                *self.static.values()]  # fmt: skip


@runtime_checkable
class Portable(Protocol):
    """Optional: an adapter whose host install can be made portable for container sandboxes."""

    name: str

    def portable(self) -> Recipe:
        """What the portable install of this harness holds."""
        ...


def loader_script(target: str) -> str:
    """A script that starts ``target`` (under HARNESS_DIR) on the bundled loader and libraries."""
    return f'#!/bin/sh\nexec {_LIB}/{_LOADER} --library-path {_LIB} {HARNESS_DIR}/{target} "$@"\n'


def _key(recipe: Recipe) -> str:
    h = hashlib.sha256(repr(recipe).encode())
    for src in recipe.sources():
        st = os.stat(src)
        h.update(f"\0{src}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return f"{recipe.name}-{recipe.version}-{h.hexdigest()[:12]}"


def portable_dir(recipe: Recipe) -> Path:
    """Where the portable install of ``recipe`` is (or will be) on this host."""
    missing = [s for s in recipe.sources() if not os.path.exists(s)]
    if missing:
        raise HarnessError(
            f"{recipe.name} {recipe.version} is not installed on this host ({missing[0]} is "
            "missing): run scripts/install-harnesses.sh"
        )
    return openforge_home() / "harnesses" / _key(recipe)


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _needed(files: list[Path]) -> set[str]:
    """The shared libraries (host paths) ``files`` need, as ``ldd`` resolves them here."""
    libs: set[str] = set()
    for f in files:
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            m = _LDD_PATH.search(line)
            if m and not m.group(1).startswith(HARNESS_DIR):
                libs.add(m.group(1))
    return libs


def _copy_tree(src: str, dst: Path) -> None:
    try:
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link)
    except OSError:  # another file system: copy the bytes
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)


def _assemble(recipe: Recipe, root: Path) -> None:
    for rel, src in recipe.trees.items():
        _copy_tree(src, root / rel)
    for rel, src in {**recipe.patched, **recipe.loaded, **recipe.static}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, root / rel)
    elves = [root / r for r in (*recipe.patched, *recipe.loaded)]
    elves += [p for r in recipe.trees for p in (root / r).rglob("*.so*") if _is_elf(p)]
    elves += [p for r in recipe.trees for p in (root / r).rglob("*.node") if _is_elf(p)]
    lib = root / "lib"
    lib.mkdir(exist_ok=True)
    for src in _needed(elves):
        name = os.path.basename(src)
        if not (lib / name).exists():
            shutil.copy2(os.path.realpath(src), lib / name)
    if not (lib / _LOADER).exists():
        shutil.copy2(os.path.realpath(f"/lib64/{_LOADER}"), lib / _LOADER)
    for rel in recipe.patched:
        subprocess.run(
            ["patchelf", "--set-interpreter", f"{_LIB}/{_LOADER}", "--force-rpath",
             "--set-rpath", _LIB, str(root / rel)],
            check=True, capture_output=True,
        )  # fmt: skip
    for rel, text in [*recipe.scripts.items(), *recipe.texts.items()]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        (root / rel).chmod(0o755 if rel in recipe.scripts else 0o644)
    for rel, target in recipe.links.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(target)


def build_portable(recipe: Recipe) -> Path:
    """The portable install of ``recipe`` on this host, assembled now if not cached.

    Assembled in a temporary directory beside the cache and renamed into place, so a
    concurrent build (another run) leaves one complete directory.
    """
    final = portable_dir(recipe)
    if final.is_dir():
        return final
    if recipe.patched and shutil.which("patchelf") is None:
        raise HarnessError("patchelf is not installed: scripts/setup.sh installs it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        _assemble(recipe, tmp)
        tmp.chmod(0o755)
        os.rename(tmp, final)
    except OSError as exc:
        if not final.is_dir():
            raise HarnessError(f"could not assemble the portable {recipe.name}: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        raise HarnessError(
            f"patchelf failed on {recipe.name}: {exc.stderr.decode(errors='replace')[-500:]}"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


async def install_for(harness: object) -> HarnessInstall | None:
    """The portable install of ``harness`` for a container or pod sandbox (built on a worker
    thread when not cached), or None for an adapter that needs none (its files are copied
    in by :meth:`configure`, like the built-in claw agent's)."""
    if not isinstance(harness, Portable):
        return None
    recipe = harness.portable()
    # Rollouts starting together may each assemble it once: the first rename wins.
    path = await asyncio.to_thread(build_portable, recipe)
    return HarnessInstall(key=path.name, path=str(path))
