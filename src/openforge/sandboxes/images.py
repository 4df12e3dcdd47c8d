"""Per-task images: built from the task's own Dockerfile, cached by content, bases substituted.

A task's image is tagged ``localhost/openforge-task:<hash>``, where the hash covers every file
of the build context (path, mode, bytes), the Dockerfile and the base-image substitutions in
force; an image with that tag is never rebuilt. ``base_images`` maps the images a Dockerfile
names in ``FROM`` to local ones (``ubuntu:24.04 = localhost/openforge-debian:bookworm``), so a
site without a public registry builds real task Dockerfiles from its own bases
(``deploy/build-debian-base.sh``). The mapping comes from the backend's option or
``$OPENFORGE_BASE_IMAGES`` (``a=b,c=d``).

Exceptions: a build that fails or runs past the task's ``build_timeout_sec`` is a
:class:`SandboxError` (the rollout's ``infra_error``) carrying the build log's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import tempfile
import weakref
from collections.abc import Mapping
from pathlib import Path

from openforge.sandboxes.base import SandboxError, TaskImage

# (engine, tag) -> the lock its build holds, per event loop (see ImageBuilder.ensure).
_BUILD_LOCKS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Lock]
] = weakref.WeakKeyDictionary()

__all__ = [
    "BASE_IMAGES_ENV",
    "TASK_IMAGE_REPO",
    "ImageBuilder",
    "base_images_from_env",
    "build_dir_image",
    "parse_base_images",
    "push_image",
    "substitute_bases",
]

BASE_IMAGES_ENV = "OPENFORGE_BASE_IMAGES"
TASK_IMAGE_REPO = "localhost/openforge-task"
_FROM = re.compile(r"^(\s*FROM\s+(?:--platform=\S+\s+)?)(\S+)(.*)$", re.I | re.M)


def parse_base_images(text: str) -> dict[str, str]:
    """``"a=b,c=d"`` (or one per line) as ``{a: b, c: d}``; a malformed entry is an error."""
    out: dict[str, str] = {}
    for part in re.split(r"[,\n]", text):
        if not part.strip():
            continue
        src, sep, dst = part.partition("=")
        if not sep or not src.strip() or not dst.strip():
            raise SandboxError(f"base image mapping must read FROM=LOCAL, got {part.strip()!r}")
        out[src.strip()] = dst.strip()
    return out


def base_images_from_env() -> dict[str, str]:
    """The mapping in ``$OPENFORGE_BASE_IMAGES`` (empty when unset)."""
    return parse_base_images(os.environ.get(BASE_IMAGES_ENV, ""))


def substitute_bases(dockerfile: str, base_images: Mapping[str, str]) -> str:
    """``dockerfile`` with every ``FROM`` image named in ``base_images`` replaced."""

    def sub(m: re.Match[str]) -> str:
        image = m.group(2)
        bare = image.removeprefix("docker.io/").removeprefix("library/")
        local = base_images.get(image) or base_images.get(bare)
        return f"{m.group(1)}{local}{m.group(3)}" if local else m.group(0)

    return _FROM.sub(sub, dockerfile)


def _excluded(rel: str, exclude: tuple[str, ...]) -> bool:
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in exclude)


def _content_hash(
    context: Path, dockerfile: str, base_images: Mapping[str, str], exclude: tuple[str, ...] = ()
) -> str:
    h = hashlib.sha256()
    h.update(dockerfile.encode())
    h.update(repr(sorted(base_images.items())).encode())
    if exclude:
        h.update(repr(sorted(exclude)).encode())
    for dirpath, dirnames, filenames in os.walk(context):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(context).as_posix()
            if _excluded(rel, exclude):
                continue
            h.update(f"\0{rel}\0{p.lstat().st_mode & 0o777}\0".encode())
            h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()[:20]


class ImageBuilder:
    """Builds task images with ``engine`` (the podman or docker binary), once per content."""

    def __init__(
        self,
        engine: str,
        base_images: Mapping[str, str] | None = None,
        build_args: list[str] | None = None,
    ) -> None:
        self.engine = engine
        self.base_images = dict(base_images_from_env() if base_images is None else base_images)
        self.build_args = build_args or []

    def tag(self, image: TaskImage) -> str:
        """The tag ``image`` builds to (its content hash), or its prebuilt reference."""
        if image.context is None or image.dockerfile is None:
            if image.image is None:
                raise SandboxError("a task image needs a Dockerfile or an image reference")
            return self.base_images.get(image.image, image.image)
        text = substitute_bases(Path(image.dockerfile).read_text(), self.base_images)
        digest = _content_hash(Path(image.context), text, self.base_images, image.exclude)
        return f"{TASK_IMAGE_REPO}:{digest}"

    async def _exists(self, tag: str) -> bool:
        proc = await asyncio.create_subprocess_exec(
            self.engine, "image", "inspect", tag,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return await proc.wait() == 0

    async def ensure(self, image: TaskImage) -> str:
        """The image's tag, built now unless an image of that content is already there."""
        tag = self.tag(image)
        if image.context is None or image.dockerfile is None:
            return tag
        # One lock per engine and tag in this event loop, shared by every builder: several
        # backends of one process (runs side by side) would otherwise build the same image
        # at once. Locks are per loop: an asyncio.Lock cannot be shared between loops.
        locks = _BUILD_LOCKS.setdefault(asyncio.get_running_loop(), {})
        lock = locks.setdefault((self.engine, tag), asyncio.Lock())
        async with lock:
            if not await self._exists(tag):
                await self._build(image, tag)
        return tag

    def _ignore_file(self, image: TaskImage, dockerfile: str) -> list[str]:
        """The build flags that keep ``image.exclude`` out of the context: the context's own
        .dockerignore plus those paths, as podman's ``--ignorefile`` or as docker's
        ``<Dockerfile>.dockerignore`` beside the (temporary) Dockerfile."""
        if not image.exclude or image.context is None:
            return []
        own = Path(image.context) / ".dockerignore"
        lines = own.read_text().splitlines() if own.is_file() else []
        lines += [e.rstrip("/") for e in image.exclude]
        path = dockerfile + ".dockerignore"
        Path(path).write_text("\n".join(lines) + "\n")
        return ["--ignorefile", path] if Path(self.engine).name == "podman" else []

    async def _build(self, image: TaskImage, tag: str) -> None:
        assert image.context is not None and image.dockerfile is not None
        text = substitute_bases(Path(image.dockerfile).read_text(), self.base_images)
        with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as fh:
            fh.write(text)
        ignore = self._ignore_file(image, fh.name)
        args = ["build", "-q", "-t", tag, "-f", fh.name, "--label", "openforge.dev/task-image=1",
                *self.build_args, *ignore, image.context]  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            self.engine, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), image.build_timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SandboxError(
                f"image build of {image.dockerfile} ran past {image.build_timeout_s:g}s"
            ) from None
        finally:
            for path in (fh.name, fh.name + ".dockerignore"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if proc.returncode != 0:
            tail = out.decode(errors="replace").strip()[-2000:]
            raise SandboxError(f"image build of {image.dockerfile} failed: {tail}")


async def build_dir_image(engine: str, root: Path, tag: str, timeout_s: float = 1800.0) -> str:
    """An image whose file system is exactly ``root`` (``FROM scratch``), tagged ``tag``;
    not rebuilt when ``tag`` exists (``tag`` names ``root``'s content). Mounted as an image
    volume it shows ``root``: how pods get a harness's portable install."""
    builder = ImageBuilder(engine)
    if await builder._exists(tag):
        return tag
    with tempfile.NamedTemporaryFile("w", suffix=".Containerfile", delete=False) as fh:
        fh.write("FROM scratch\nCOPY . /\n")
    proc = await asyncio.create_subprocess_exec(
        engine, "build", "-q", "-t", tag, "-f", fh.name, "--label",
        "openforge.dev/harness-image=1", str(root),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SandboxError(f"image build of {root} ran past {timeout_s:g}s") from None
    finally:
        os.unlink(fh.name)
    if proc.returncode != 0:
        raise SandboxError(f"image build of {root} failed: {out.decode(errors='replace')[-2000:]}")
    return tag


async def push_image(engine: str, tag: str, registry: str) -> str:
    """Tag ``tag`` under ``registry`` and push it; return the pushed reference."""
    ref = f"{registry.rstrip('/')}/{tag.rsplit('/', 1)[-1]}"
    for args in (("tag", tag, ref), ("push", ref)):
        proc = await asyncio.create_subprocess_exec(
            engine, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SandboxError(f"{args[0]} {ref} failed: {out.decode(errors='replace')[-1000:]}")
    return ref
