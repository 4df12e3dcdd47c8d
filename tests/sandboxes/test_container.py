"""The podman backend against real containers (skipped, with the reason, where podman can't run)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxError, SandboxSpec, create_backend
from openforge.sandboxes.base import TaskImage
from openforge.sandboxes.container import (
    ContainerBackend,
    gateway_inside,
    sandbox_image_default,
)
from openforge.sandboxes.fspaths import PathEscape
from openforge.sandboxes.images import ImageBuilder

from .gateway_probe import check_gateway_only, gateway_server, tcp_server

REPO = Path(__file__).resolve().parents[2]


def _podman_reason() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed"
    probe = subprocess.run(["podman", "info"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"podman does not work here: {probe.stderr.strip()[-300:]}"
    return None


def _sources_hash() -> str:
    names = ("__init__", "base", "fspaths", "gateway_relay", "procs", "runtime", "sandboxd")
    data = b"".join((REPO / "src/openforge/sandboxes" / f"{n}.py").read_bytes() for n in names)
    return hashlib.sha256(data).hexdigest()[:16]


def _image_sources(image: str) -> str:
    fmt = '{{ index .Labels "openforge.dev/sources" }}'
    out = subprocess.run(["podman", "image", "inspect", "--format", fmt, image],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else ""


def test_gateway_url_mapping() -> None:
    assert gateway_inside("http://127.0.0.1:8080/r/k", "10.0.2.2") == "http://10.0.2.2:8080/r/k"
    assert gateway_inside("http://gw.svc:80", "10.0.2.2") == "http://gw.svc:80"
    assert gateway_inside(None, "x") is None


@pytest.fixture(scope="module")
def image() -> str:
    reason = _podman_reason()
    if reason:
        print(f"SKIP podman tests: {reason}")
        pytest.skip(reason)
    tag = sandbox_image_default()
    if _image_sources(tag) != _sources_hash():  # missing, or built from older code
        build = subprocess.run(
            [str(REPO / "deploy/build-sandbox-image.sh"), tag, "podman"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if build.returncode != 0:
            reason = f"cannot build the sandbox image: {build.stderr.strip()[-500:]}"
            print(f"SKIP podman tests: {reason}")
            pytest.skip(reason)
    return tag


@pytest.fixture
async def backend(image: str) -> AsyncIterator[ContainerBackend]:
    b = create_backend("podman", image=image)
    assert isinstance(b, ContainerBackend)
    yield b
    await b.close()


@pytest.mark.slow
async def test_podman_sandbox_exec_files_and_gateway(backend: ContainerBackend) -> None:
    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"gw")
        await w.drain()
        w.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        box = await backend.create(
            SandboxSpec(gateway_url=f"http://127.0.0.1:{port}", memory_mb=256, pids=64, cpu=1,
                        network="open")
        )  # fmt: skip
        assert box.gateway_url == f"http://10.0.2.2:{port}"
        await box.put({"in.txt": b"data"})
        probe = (
            "import socket\n"
            f"s = socket.create_connection(('10.0.2.2', {port}), 5)\n"
            "print(s.recv(2).decode(), open('in.txt').read())\n"
        )
        result = await box.exec(["python3", "-c", probe], timeout=60)
        assert result.stdout == b"gw data\n", result
        timed = await box.exec("sleep 100", timeout=1)
        assert timed.timed_out
        with pytest.raises(PathEscape):
            await box.get(["../etc/passwd"])
        await box.close()
    assert await backend.gc() == []


@pytest.mark.slow
async def test_a_root_too_deep_for_a_unix_socket_keeps_the_sockets_in_tmp(
    image: str, tmp_path: Path
) -> None:
    """A run directory deep enough that ``<root>/sb-…/sandboxd.sock`` passes a Unix socket
    path's 107 bytes: the sockets go under the temporary directory, the sandbox works, and
    closing it removes both of its directories."""
    root = tmp_path / ("deep-run-directory-" * 3)
    b = ContainerBackend("podman", image=image, root=str(root))
    assert b.sockets != b.root and b.root == root / "openforge-podman"
    try:
        box = await b.create(SandboxSpec(network="none"))
        assert (b.sockets / box.id / "sandboxd.sock").is_socket()
        assert (b.root / box.id).is_dir()
        result = await box.exec("echo ok", timeout=60)
        assert result.stdout == b"ok\n", result
        await box.close()
        assert not (b.sockets / box.id).exists() and not (b.root / box.id).exists()
    finally:
        await b.close()


@pytest.mark.slow
async def test_podman_network_none(backend: ContainerBackend) -> None:
    box = await backend.create(SandboxSpec(network="none", gateway_url="http://127.0.0.1:1"))
    assert box.gateway_url is None
    probe = (
        "import socket\n"
        "try: socket.create_connection(('10.0.2.2', 1), 2)\n"
        "except OSError as e: print('blocked', e.errno)"
    )
    result = await box.exec(["python3", "-c", probe], timeout=60)
    assert result.stdout.startswith(b"blocked"), result
    await box.close()


@pytest.mark.slow
async def test_podman_network_gateway_reaches_only_the_gateway(backend: ContainerBackend) -> None:
    other = await tcp_server()
    try:
        async with gateway_server() as port:
            box = await backend.create(
                SandboxSpec(network="gateway", gateway_url=f"http://127.0.0.1:{port}/v1")
            )
            assert box.gateway_url == f"http://127.0.0.1:{port}/v1"
            await check_gateway_only(box, other)
            await box.close()
    finally:
        other.close()


@pytest.mark.slow
async def test_storage_mb_bounds_workdir_home_and_tmp(
    podman_images: dict[str, str], tmp_path: Path
) -> None:
    """``disk_mb`` on podman: the task image's workdir (its files copied up), HOME and /tmp
    share one filesystem of that size; writing past it is ENOSPC; closing removes it all."""
    from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

    d = samples.harbor_pytest(tmp_path / "suite")
    image = TaskImage(context=str(d / "environment"), dockerfile=str(d / "environment/Dockerfile"))
    b = ContainerBackend("podman", base_images=samples.BASE_IMAGES, root=str(tmp_path / "pm"))
    box = await b.create(SandboxSpec(task_image=image, workdir="/app", disk_mb=64, network="none"))
    try:
        res = await box.exec("cat /app/data.txt && df -m /app /tmp $HOME | tail -n +2", timeout=60)
        out = res.stdout.decode()
        assert res.exit_code == 0 and out.startswith(samples.DATA), res
        sizes = {int(line.split()[1]) for line in out.splitlines()[3:]}
        assert len(sizes) == 1 and 50 < sizes.pop() < 100, out  # one ~64 MB filesystem
        fill = await box.exec("dd if=/dev/zero of=/tmp/big bs=1M count=100", timeout=60)
        assert fill.exit_code != 0 and b"No space left" in fill.stderr, fill
        await box.exec("rm /tmp/big && echo ok > $HOME/f", timeout=60)
        assert (await box.get(["/app/data.txt"]))["/app/data.txt"].decode() == samples.DATA
    finally:
        await box.close()
        await b.close()
    fs = next((tmp_path / "pm" / "openforge-podman").glob("sb-*/fs"), None)
    assert fs is None, "the sandbox's disk and directory outlive it"
    volumes = subprocess.run(["podman", "volume", "ls", "-q"], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    assert box.id not in volumes


def test_docker_without_its_daemon_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("docker") is None:
        with pytest.raises(SandboxError, match=r"apt-get install docker\.io"):
            ContainerBackend("docker")
        return
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    with pytest.raises(SandboxError, match=r"daemon is not reachable.*--backend podman"):
        ContainerBackend("docker")


@pytest.mark.slow
async def test_task_image_starts_survive_removals_of_the_same_image_mount(
    podman_images: dict[str, str], tmp_path: Path
) -> None:
    """Containers of a task image mount sandboxd's runtime from the sandbox image; podman's
    removal of one unmounts it under a container starting at that moment. Starts overlapping
    removals, within one backend and from a second one (another process's rollouts), all
    come up."""
    from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

    d = samples.harbor_pytest(tmp_path / "suite")
    image = TaskImage(context=str(d / "environment"), dockerfile=str(d / "environment/Dockerfile"))
    spec = SandboxSpec(task_image=image, workdir="/app", network="none")
    one, two = (
        ContainerBackend("podman", base_images=samples.BASE_IMAGES, root=str(tmp_path / n))
        for n in ("a", "b")
    )
    boxes = list(await asyncio.gather(*(one.create(spec) for _ in range(3))))
    try:
        for backend in (one, two, one, two, one, two):
            old, boxes[:] = boxes[:], []
            made = await asyncio.gather(
                *(b.close() for b in old), *(backend.create(spec) for _ in range(3))
            )
            boxes += [b for b in made if b is not None]
            for box in boxes:
                res = await box.exec("cat /app/data.txt", timeout=60)
                assert res.exit_code == 0 and res.stdout.decode() == samples.DATA, res
    finally:
        await asyncio.gather(*(b.close() for b in boxes))
        await one.close()
        await two.close()


@pytest.mark.slow
async def test_builders_of_one_process_build_an_image_once(
    podman_images: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two backends of one process (two runs side by side) asking for the same task image at
    once build it once: the second waits for the first's build and finds the image."""
    from tasks import harbor_samples as samples  # tests/ is on sys.path (its conftest)

    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM debian:bookworm\nRUN echo {tmp_path.name} > /built-once\n"  # a fresh tag per test
    )
    image = TaskImage(context=str(tmp_path / "ctx"), dockerfile=str(tmp_path / "ctx/Dockerfile"))
    builders = [ImageBuilder("podman", samples.BASE_IMAGES) for _ in range(2)]
    builds: list[str] = []
    real = ImageBuilder._build

    async def counted(self: ImageBuilder, image: TaskImage, tag: str) -> None:
        builds.append(tag)
        await real(self, image, tag)

    monkeypatch.setattr(ImageBuilder, "_build", counted)
    try:
        tags = await asyncio.gather(*(b.ensure(image) for b in builders))
        assert tags[0] == tags[1] and builds == [tags[0]]
    finally:
        subprocess.run(["podman", "rmi", "--force", builders[0].tag(image)], check=False,
                       capture_output=True)  # fmt: skip
