"""The ``podman`` / ``docker`` backends: one container per sandbox with sandboxd inside.

The host talks to sandboxd over a Unix socket in a bind-mounted directory, so control
traffic needs no published port and works even with ``network="none"``. With
``network="gateway"`` the container has no network either (``--network none``, loopback
only): a second socket in that directory leads to the host's relay to the gateway, and
sandboxd serves it on the container's ``127.0.0.1:PORT``; nothing else is reachable. With
``"open"`` the harness reaches the gateway through the engine's host alias: podman's
slirp4netns with ``allow_host_loopback`` (the host's 127.0.0.1 is 10.0.2.2 inside), docker's
``host-gateway``. The image is built offline by ``deploy/build-sandbox-image.sh``.

A task that brings its own environment (``SandboxSpec.task_image``: Harbor's
``environment/Dockerfile``, Terminal-Bench's Dockerfile) runs in the image built from it
(``sandboxes/images.py``), unedited, with sandboxd from the sandbox image mounted beside it
(``sandboxes/runtime.py``). A task with a GUI environment (``SandboxSpec.gui``: a browser or
a desktop) runs the same way in the GUI image (``deploy/build-gui-image.sh``: chromium, Xvfb,
openbox and the environments' Python at /opt/openforge/gui), podman only; a missing GUI image
is a :class:`SandboxError` saying how to build it. ``$HOME`` is ``/home/sandbox`` everywhere,
as in the local backend, where the harness adapters put their files. A harness the image
lacks (any but the built-in claw agent) comes as its portable install (``SandboxSpec.harness``,
``harnesses/portable.py``), bind-mounted read-only at ``/opt/openforge/harness``.

``disk_mb`` (Harbor's ``storage_mb``): where this process can make loop disks (root), the
workdir, HOME and /tmp are bind mounts of one ``disk_mb`` ext4 filesystem of the sandbox's
own (``disk.py``, as the local backend does; podman's own ``--storage-opt size`` needs an
overlay on xfs with project quotas). The workdir is a named volume over it, so what the
image has there is copied up first. The rest of the container's writable layer is not
bounded; without loop disks only each file's size is (``--ulimit fsize``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from openforge.sandboxes.base import (
    HARNESS_DIR,
    SandboxError,
    SandboxSpec,
    ServiceContainer,
    service_env,
)
from openforge.sandboxes.disk import DiskError, loop_disks_available, make_disk, remove_disk
from openforge.sandboxes.gateway_relay import GatewayRelay, gateway_address
from openforge.sandboxes.images import ImageBuilder
from openforge.sandboxes.remote import RemoteSandbox, SandboxdClient
from openforge.sandboxes.runtime import RT_DIR, RT_ENTRYPOINT, SANDBOX_HOME

__all__ = [
    "DEFAULT_GUI_IMAGE",
    "DEFAULT_IMAGE",
    "GUI_IMAGE_ENV",
    "SANDBOX_IMAGE_ENV",
    "SANDBOX_LABEL",
    "ContainerBackend",
    "gateway_inside",
    "gui_image_default",
    "sandbox_image_default",
]

DEFAULT_IMAGE = "localhost/openforge-sandbox:latest"
# Names another sandbox image (one built from other sources beside the default).
SANDBOX_IMAGE_ENV = "OPENFORGE_SANDBOX_IMAGE"
# What deploy/build-gui-image.sh builds by default; $OPENFORGE_GUI_IMAGE names another.
DEFAULT_GUI_IMAGE = "localhost/openforge-gui:bookworm"
GUI_IMAGE_ENV = "OPENFORGE_GUI_IMAGE"
SANDBOX_LABEL = "openforge.dev/sandbox"
_SOCKET_DIR = "/run/openforge"
# Tries at starting a container whose image mount another process's removal took away.
_START_TRIES = 3
# A Unix socket's path holds at most 107 bytes (sun_path is 108 with its NUL); the longest
# host path is ``<sockets>/sb-<12 hex>/sandboxd.sock``.
_SUN_PATH_MAX = 107
_SOCKET_TAIL = len("/sb-") + 12 + len("/sandboxd.sock")


def _socket_fits(base: Path) -> bool:
    """Whether a sandbox's sockets under ``base`` stay within a Unix socket path's limit."""
    return len(os.fsencode(base)) + _SOCKET_TAIL <= _SUN_PATH_MAX


# The host as seen from a container, per engine and network mode.
_HOST_ALIAS = {"podman": "10.0.2.2", "docker": "host.docker.internal"}


def gateway_inside(url: str | None, host_alias: str) -> str | None:
    """``url`` with a loopback host replaced by the address the host has inside."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return url
    netloc = host_alias + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def sandbox_image_default() -> str:
    """The sandbox image a backend uses when not told: ``$OPENFORGE_SANDBOX_IMAGE``, else
    the default."""
    return os.environ.get(SANDBOX_IMAGE_ENV) or DEFAULT_IMAGE


def gui_image_default() -> str:
    """The GUI image a backend uses when not told: ``$OPENFORGE_GUI_IMAGE``, else the default."""
    return os.environ.get(GUI_IMAGE_ENV) or DEFAULT_GUI_IMAGE


def _docker_reachable(path: str) -> None:
    """:class:`SandboxError` saying so when docker's daemon does not answer."""
    try:
        res = subprocess.run([path, "version", "--format", "{{.Server.Version}}"],
                             capture_output=True, text=True, timeout=20, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SandboxError("docker's daemon did not answer within 20 s") from None
    if res.returncode != 0:
        why = (res.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SandboxError(
            f"docker is installed but its daemon is not reachable ({why}): start dockerd, "
            "or use --backend podman"
        )


def _ulimits() -> list[str]:
    # runc cannot raise a limit when CAP_SYS_RESOURCE is missing (as in nested sandboxes),
    # and the engines' defaults (1M open files) are higher than such hosts allow.
    args = []
    for name, kind, cap in (
        ("nofile", resource.RLIMIT_NOFILE, 16384),
        ("nproc", resource.RLIMIT_NPROC, 8192),
    ):
        soft, _ = resource.getrlimit(kind)
        value = cap if soft == resource.RLIM_INFINITY else min(cap, soft // 2)
        args += ["--ulimit", f"{name}={value}:{value}"]
    return args


class ContainerBackend:
    """Sandboxes as containers of ``image`` run by ``engine`` (``podman`` or ``docker``);
    ``gui_image`` for tasks with a GUI environment (default :func:`gui_image_default`)."""

    def __init__(
        self,
        engine: str = "podman",
        image: str | None = None,
        ready_timeout: float = 60.0,
        root: str | None = None,
        extra_args: list[str] | None = None,
        base_images: dict[str, str] | None = None,
        gui_image: str | None = None,
    ) -> None:
        if engine not in _HOST_ALIAS:
            raise SandboxError(f"container engine must be podman or docker, not {engine!r}")
        path = shutil.which(engine)
        if path is None:
            package = "docker.io" if engine == "docker" else engine
            raise SandboxError(f"{engine} is not installed (apt-get install {package})")
        if engine == "docker":
            _docker_reachable(path)
        self.name = engine
        self.engine = path
        self.image = image or sandbox_image_default()
        self.gui_image = gui_image or gui_image_default()
        self.ready_timeout = ready_timeout
        self.root = Path(root or tempfile.gettempdir()) / f"openforge-{engine}"
        self.root.mkdir(parents=True, exist_ok=True)
        # Each sandbox's control and gateway sockets live in a directory of their own, and a
        # Unix socket path holds at most 107 bytes: under a deep root (a run directory) they go
        # to the system's temporary directory, while the sandbox's disk stays under the root.
        self.sockets = self.root
        if not _socket_fits(self.root):
            self.sockets = Path(tempfile.gettempdir()) / f"openforge-{engine}-sockets"
            self.sockets.mkdir(mode=0o700, exist_ok=True)
            if not _socket_fits(self.sockets):
                raise SandboxError(
                    f"temporary directory {tempfile.gettempdir()} is too deep for the sandboxes' "
                    "Unix sockets (set TMPDIR to a shorter path)"
                )
        self.extra_args = extra_args or []
        self.builder = ImageBuilder(path, base_images, build_args=_ulimits())
        self._open: dict[str, RemoteSandbox] = {}
        self._entrypoints: dict[str, list[str]] = {}
        self._gui_checked = False
        # podman unmounts an image mount (sandboxd's runtime at RT_DIR) while it removes a
        # container, and a container starting meanwhile with the same image mount can find
        # the mount gone ("error mounting … to rootfs at /opt/openforge/rt … no such file"):
        # here the starts and removals of such containers take turns, and a start that lost
        # the race to another process on this host is tried again (_start).
        self._image_mounts = asyncio.Lock()

    async def _run(self, *args: str, check: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            self.engine,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if check and proc.returncode != 0:
            raise SandboxError(
                f"{self.name} {args[0]} failed ({proc.returncode}): {err.decode().strip()}"
            )
        return out.decode()

    def _network(self, spec: SandboxSpec) -> list[str]:
        if spec.network != "open":
            return ["--network", "none"]
        if self.name == "podman":
            return ["--network", "slirp4netns:allow_host_loopback=true"]
        return ["--add-host", "host.docker.internal:host-gateway"]

    def _resources(self, spec: SandboxSpec, own_disk: bool) -> list[str]:
        args = _ulimits()
        if spec.disk_mb is not None and not own_disk:
            args += ["--ulimit", f"fsize={spec.disk_mb * 1024 * 1024}"]
        if spec.cpu is not None:
            args += ["--cpus", str(spec.cpu)]
        if spec.memory_mb is not None:
            args += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
        if spec.pids is not None:
            args += ["--pids-limit", str(spec.pids)]
        return args

    async def _image(self, spec: SandboxSpec) -> list[str]:
        """The image (and entry point) arguments: the sandbox image, the task's own, or the
        GUI image (a task's own image wins: it must then carry its GUI itself)."""
        if spec.task_image is None and not spec.gui:
            return [self.image]
        if self.name != "podman":
            what = "a task's own image" if spec.task_image is not None else "a GUI task"
            raise SandboxError(f"{what} needs podman (docker has no image mounts)")
        mount = ["--mount", f"type=image,source={self.image},destination={RT_DIR}"]
        if spec.task_image is None:
            # Like a task's own image, the GUI image has no sandboxd and no entry point.
            await self._check_gui_image()
            return [*mount, "--entrypoint", json.dumps(RT_ENTRYPOINT), self.gui_image]
        tag = await self.builder.ensure(spec.task_image)
        entry = await self._entrypoint(tag)
        if entry and entry[-1] != "-c":  # a bare `sh -c` wrapper sets nothing up
            # Harbor starts a task image with its own ENTRYPOINT and a keep-alive command, and
            # such entry points set the task up (hosts entries, background services) and end
            # in `exec "$@"`: here the command is sandboxd, so the same setup runs first.
            return [*mount, "--entrypoint", json.dumps(entry), tag, *RT_ENTRYPOINT]
        return [*mount, "--entrypoint", json.dumps(RT_ENTRYPOINT), tag]

    async def _check_gui_image(self) -> None:
        """:class:`SandboxError` saying how to build the GUI image when the engine lacks it
        (else podman would try to pull ``localhost/…`` and fail with a registry error)."""
        if self._gui_checked:
            return
        proc = await asyncio.create_subprocess_exec(
            self.engine, "image", "exists", self.gui_image,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await proc.wait() != 0:
            raise SandboxError(
                f"the GUI image {self.gui_image} is missing: build it with "
                f"deploy/build-gui-image.sh {self.gui_image} {self.name}"
            )
        self._gui_checked = True

    async def _entrypoint(self, tag: str) -> list[str]:
        """The ENTRYPOINT a built task image declares (empty when none)."""
        if tag not in self._entrypoints:
            out = await self._run(
                "image", "inspect", "--format", "{{json .Config.Entrypoint}}", tag
            )
            value = json.loads(out or "null")
            self._entrypoints[tag] = [str(v) for v in value] if isinstance(value, list) else []
        return self._entrypoints[tag]

    async def create(self, spec: SandboxSpec) -> RemoteSandbox:
        """Start a container running sandboxd and wait until it answers."""
        image = await self._image(spec)
        relay = None
        if spec.network == "gateway" and spec.gateway_url:
            try:
                address = gateway_address(spec.gateway_url)
            except ValueError as exc:
                raise SandboxError(str(exc)) from exc
        sid = "sb-" + secrets.token_hex(6)
        name = f"openforge-{sid}"
        token = secrets.token_urlsafe(32)
        sockdir, boxdir = self.sockets / sid, self.root / sid
        sockdir.mkdir(mode=0o700)
        boxdir.mkdir(mode=0o700, exist_ok=True)
        try:
            disk = await self._disk(spec, sid, boxdir)
        except SandboxError:
            await asyncio.to_thread(shutil.rmtree, sockdir, True)
            raise
        labels = [f"--label={k}={v}" for k, v in {**spec.labels, SANDBOX_LABEL: sid}.items()]
        env = [f"--env={k}={v}" for k, v in spec.env.items()]
        if spec.harness is not None:
            env += ["--volume", f"{spec.harness.path}:{HARNESS_DIR}:ro"]
        args = [
            "run", "--detach", "--name", name, *labels, *env,
            "--env", f"OPENFORGE_SANDBOXD_TOKEN={token}", "--env", f"HOME={SANDBOX_HOME}",
            "--volume", f"{sockdir}:{_SOCKET_DIR}",
            *disk, *self._network(spec), *self._resources(spec, bool(disk)), *self.extra_args,
            *image, "--workdir", spec.workdir, "--home", SANDBOX_HOME,
            "--uds", f"{_SOCKET_DIR}/sandboxd.sock",
        ]  # fmt: skip
        if spec.network == "gateway" and spec.gateway_url:
            relay = GatewayRelay(address, str(sockdir / "gateway.sock"))
            args += ["--gateway-port", str(address.inside_port),
                     "--gateway-socket", f"{_SOCKET_DIR}/gateway.sock"]  # fmt: skip

        mounted = "--mount" in image

        async def remove() -> None:
            self._open.pop(sid, None)
            if spec.services:
                sidecars = [f"{name}-{svc.name}" for svc in spec.services]
                await self._run("rm", "--force", "--time", "0", *sidecars, check=False)
            async with self._image_mounts if mounted else contextlib.nullcontext():
                await self._run("rm", "--force", "--time", "0", name, check=False)
            if disk:
                await self._run("volume", "rm", "--force", f"{name}-work", check=False)
                await asyncio.to_thread(remove_disk, boxdir / "fs")
            if relay is not None:
                await relay.close()
            for d in {sockdir, boxdir}:
                await asyncio.to_thread(shutil.rmtree, d, True)

        client = SandboxdClient("http://sandboxd", token, uds=str(sockdir / "sandboxd.sock"))
        alias = _HOST_ALIAS[self.name]
        url = gateway_inside(spec.gateway_url, alias) if spec.network == "open" else None
        if relay is not None:
            url = relay.address.inside_url if relay.address else None
        box = RemoteSandbox(sid, client, url, remove)
        try:
            if relay is not None:
                await relay.serve_unix()
            await self._start(name, args, mounted)
            await client.wait_ready(self.ready_timeout)
        except BaseException as exc:
            logs = await self._run("logs", name, check=False) if isinstance(exc, Exception) else ""
            await box.close()
            if logs:
                raise SandboxError(f"container {name} did not start: {logs[-2000:]}") from exc
            raise
        try:
            for svc in spec.services:
                await self._sidecar(name, svc, labels, service_env(svc, spec.service_key, url))
        except BaseException:
            await box.close()
            raise
        self._open[sid] = box
        return box

    async def _sidecar(
        self, main: str, svc: ServiceContainer, labels: list[str], environ: dict[str, str]
    ) -> None:
        """Start ``svc`` with ``environ`` in ``main``'s network namespace, name it in
        ``main``'s hosts file and wait until its healthcheck passes (:class:`SandboxError`
        with its logs otherwise)."""
        if self.name != "podman":
            raise SandboxError("a task's sidecar services need podman")
        tag = await self.builder.ensure(svc.image)
        cname = f"{main}-{svc.name}"
        env = [f"--env={k}={v}" for k, v in environ.items()]
        await self._run(
            "run", "--detach", "--name", cname, *labels, *env, "--network", f"container:{main}",
            *_ulimits(), tag, *svc.command,
        )  # fmt: skip
        # --add-host is ignored without a network of the container's own: the name goes to
        # the hosts file, as compose's service names resolve in Harbor's main container.
        await self._run("exec", "--user", "root", main, "sh", "-c",
                        f"echo '127.0.0.1 {svc.name}' >> /etc/hosts")  # fmt: skip
        if not svc.health:
            return
        start, failures, out = time.monotonic(), 0, ""
        while True:
            proc = await asyncio.create_subprocess_exec(
                self.engine, "exec", cname, *svc.health,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            try:
                raw, _ = await asyncio.wait_for(proc.communicate(), svc.timeout_s)
                if proc.returncode == 0:
                    return
                out = raw.decode(errors="replace")[-1000:]
            except TimeoutError:
                proc.kill()
                await proc.wait()
                out = f"timed out after {svc.timeout_s:g}s"
            if time.monotonic() - start >= svc.start_period_s:
                failures += 1
                if failures >= svc.retries:
                    logs = await self._run("logs", cname, check=False)
                    raise SandboxError(
                        f"sidecar {svc.name} is unhealthy ({failures} tries): {out} {logs[-1500:]}"
                    )
            await asyncio.sleep(svc.interval_s)

    async def _start(self, name: str, args: list[str], mounted: bool) -> None:
        """``podman run`` a container; one with an image mount takes its turn with removals,
        and is started again (at most twice) when its image mount vanished all the same."""
        if not mounted:
            await self._run(*args)
            return
        for attempt in range(_START_TRIES):
            async with self._image_mounts:
                try:
                    await self._run(*args)
                    return
                except SandboxError as exc:
                    lost = f'to rootfs at "{RT_DIR}"' in str(exc)
                    if not lost or attempt == _START_TRIES - 1:
                        raise
                    await self._run("rm", "--force", "--time", "0", name, check=False)

    async def _disk(self, spec: SandboxSpec, sid: str, boxdir: Path) -> list[str]:
        """The mounts that put the workdir, HOME and /tmp on a ``disk_mb`` disk of their own
        (none without ``disk_mb`` or where loop disks cannot be made), kept in ``boxdir``."""
        if spec.disk_mb is None or not loop_disks_available():
            return []
        fs = boxdir / "fs"
        volume = f"openforge-{sid}-work"
        try:
            await asyncio.to_thread(make_disk, boxdir / "disk.img", fs, spec.disk_mb, (0, 0))
            for sub, mode in (("work", 0o755), ("home", 0o755), ("tmp", 0o1777)):
                (fs / sub).mkdir()
                (fs / sub).chmod(mode)
            # A named volume (not a bind mount): the image's own workdir content is copied up.
            await self._run("volume", "create", "--opt", "type=none", "--opt", "o=bind",
                            "--opt", f"device={fs / 'work'}", volume)  # fmt: skip
        except (DiskError, SandboxError, OSError) as exc:
            await asyncio.to_thread(remove_disk, fs)
            await asyncio.to_thread(shutil.rmtree, boxdir, True)
            raise SandboxError(f"sandbox disk: {exc}") from exc
        return ["--volume", f"{volume}:{spec.workdir}", "--volume", f"{fs / 'home'}:{SANDBOX_HOME}",
                "--volume", f"{fs / 'tmp'}:/tmp"]  # fmt: skip

    async def close(self) -> None:
        """Remove every container this backend still holds."""
        await asyncio.gather(*(box.close() for box in list(self._open.values())))

    async def gc(self) -> list[str]:
        """Remove every OpenForge sandbox container on this engine (orphans of crashed runs)."""
        out = await self._run(
            "ps", "--all", "--filter", f"label={SANDBOX_LABEL}", "--format", "{{.Names}}"
        )
        names = [n for n in out.split() if n]
        if names:
            await self._run("rm", "--force", "--time", "0", *names, check=False)
        return names
