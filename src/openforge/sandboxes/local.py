"""The ``local`` backend: bubblewrap process sandboxes on this machine.

"Create" is a directory (workspace, HOME, /tmp) plus a cgroup: namespaces are set up by
``bwrap`` on each exec, so every exec starts from the same read-only system. Run as root,
the directories sit on the sandbox's own size-limited filesystem (``disk.py``; a few tens of
milliseconds to make) and every exec drops to an unprivileged host uid before ``bwrap``, so
uid 0 inside is that uid outside, never host root; otherwise creating a sandbox costs well
under a millisecond and uid 0 inside is the (unprivileged) caller. See docs/sandboxes.md
for exactly what this isolates and what it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import shlex
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import orjson

from openforge.guest import source
from openforge.sandboxes.base import (
    DEFAULT_DISK_MB,
    ExecResult,
    OutputCallback,
    SandboxError,
    SandboxSpec,
)
from openforge.sandboxes.disk import DiskError, loop_disks_available, make_disk, remove_disk
from openforge.sandboxes.fspaths import read_files, write_files
from openforge.sandboxes.gateway_relay import GatewayRelay, gateway_address
from openforge.sandboxes.limits import Cgroup, CgroupLayout, detect_cgroups, rlimit_args
from openforge.sandboxes.local_verify import (
    ExecView,
    exec_local_verifier,
    unprivileged_ids,
    verifier_ids,
)
from openforge.sandboxes.netns import can_setns, listen_in
from openforge.sandboxes.procs import DEFAULT_MAX_OUTPUT, process_start, run_streaming, wait_gone
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.sandboxes.verifier import VerifierExec, VerifierRun

__all__ = ["SANDBOX_HOME", "LocalBackend", "LocalSandbox", "unprivileged_ids"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Top-level system paths visible read-only (symlinks such as /bin -> usr/bin are mirrored).
_SYSTEM = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
# Secrets in /etc that a sandbox has no business reading (when it runs as the caller, and
# the caller is root, these would be readable).
_MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
# Where the gateway relay's socket and forwarder appear inside a "gateway" sandbox.
_RELAY_SOCK = "/run/openforge/gateway.sock"
_FORWARDER = "/run/openforge/forwarder.py"
_FORWARDER_SRC = str(source("gateway_forwarder"))


def _system_mounts() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # /etc/resolv.conf is often a link into /run; bind its target so DNS config is visible.
    resolv = os.path.realpath("/etc/resolv.conf")
    if not resolv.startswith("/etc/") and os.path.exists(resolv):
        args += ["--ro-bind", resolv, resolv]
    for secret in _MASKED:
        if os.path.exists(secret):
            args += ["--ro-bind", "/dev/null", secret]
    return args


def _unreachable(path: Path, uid: int) -> Path | None:
    """The first directory on ``path`` that ``uid`` (not its owner) may not search."""
    for d in [path, *path.parents]:
        st = d.stat()
        if not st.st_mode & stat.S_IXOTH and not (st.st_uid == uid and st.st_mode & stat.S_IXUSR):
            return d
    return None


class LocalSandbox:
    """One bubblewrap sandbox: a directory on the host, namespaces per exec."""

    def __init__(
        self, backend: LocalBackend, sid: str, spec: SandboxSpec, cgroup: Cgroup | None
    ) -> None:
        self.id = sid
        self.spec = spec
        self.dir = backend.root / sid
        self.workdir = spec.workdir
        self.home = SANDBOX_HOME
        # "open" shares the host network: the gateway's URL is unchanged. "gateway" has its
        # own network namespace per exec, reaching only the gateway through a relay.
        self.gateway_url = spec.gateway_url if spec.network == "open" else None
        self.relay: GatewayRelay | None = None
        self._setns = False
        self._inside_port = 0
        if spec.network == "gateway" and spec.gateway_url:
            address = gateway_address(spec.gateway_url)
            self._setns = backend.relay_mode == "setns"
            path = None if self._setns else str(backend.relay_dir / f"{sid}.sock")
            self.relay = GatewayRelay(address, path)
            self.gateway_url = address.inside_url
            self._inside_port = address.inside_port
        self._backend = backend
        self._cgroup = cgroup
        self._running: dict[int, Callable[[], None]] = {}  # bwrap's pid: kill the exec
        self._closed = False
        data = backend.data_dir(sid)
        self._roots = {
            self.workdir: data / "workspace",
            SANDBOX_HOME: data / "home",
            "/tmp": data / "tmp",
        }
        binds = tuple((str(self._roots[p]), p, True) for p in ("/tmp", SANDBOX_HOME, self.workdir))
        self.view = ExecView(backend.ids, binds)

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        base = {
            "PATH": _DEFAULT_PATH,
            "HOME": SANDBOX_HOME,
            "USER": "root",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "OPENFORGE_SANDBOX_ID": self.id,
        }
        return {**base, **self.spec.env, **(env or {})}

    def _argv(
        self,
        cmd: Sequence[str] | str,
        cwd: str | None,
        status_fd: int,
        block_fd: int,
        view: ExecView | None = None,
    ) -> list[str]:
        spec = self.spec
        view = view or self.view
        ids = view.ids
        wd = os.path.normpath(os.path.join(self.workdir, cwd or "."))
        bwrap = [
            self._backend.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop", "ALL",
            "--hostname", "openforge",
            "--json-status-fd", str(status_fd),
            *(["--uid", "0", "--gid", "0"] if ids else []),
            *self._backend.system_mounts,
            *(arg for p in spec.host_paths for arg in ("--ro-bind", p, p)),
            "--proc", "/proc",
            "--dev", "/dev",
            *(arg for host, inside, rw in view.binds
              for arg in ("--bind" if rw else "--ro-bind", host, inside)),
        ]  # fmt: skip
        if spec.network != "open":
            bwrap.append("--unshare-net")
        bwrap += ["--chdir", wd]
        if not view.gateway:
            bwrap.append("--")
        elif block_fd >= 0:
            # setns relay: the command waits until the host has made the gateway's port. Not
            # bwrap's --block-fd: on EOF (the exec was cancelled) that runs the command anyway,
            # and its init may have lost --die-with-parent by then (it is reset when bwrap
            # changes credentials), so the command would outlive us. This gate exits instead.
            gate = f'read -r _ </proc/self/fd/{block_fd} || exit 125; exec "$@"'
            bwrap += ["--", "/bin/sh", "-c", gate, "openforge-gate"]
        elif self.relay is not None and self.relay.path is not None:
            port = str(self._inside_port)
            python = self._backend.python or "python3"
            bwrap += ["--ro-bind", self.relay.path, _RELAY_SOCK, "--ro-bind", _FORWARDER_SRC,
                      _FORWARDER, "--", python, "-I", "-S", _FORWARDER, port,
                      _RELAY_SOCK]  # fmt: skip
        else:
            bwrap.append("--")
        bwrap += ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        # Limits a cgroup does not cover are rlimits, set by prlimit just before bwrap.
        cpu_s = int(spec.lifetime_s * (spec.cpu or 1)) + 1 if spec.lifetime_s else None
        mem = None if self._cgroup and "memory" in self._cgroup.dirs else spec.memory_mb
        # A disk of its own bounds the total; else only each file's size is bounded.
        disk_mb = None if self._backend.loop_disks else spec.disk_mb
        limits = rlimit_args(mem, disk_mb, cpu_s)
        if ids is not None:
            # After the cgroup join (root's to make): bwrap's user namespace maps uid 0
            # inside to this unprivileged uid, so host root's files are others' to it.
            uid, gid = ids
            bwrap = [self._backend.setpriv, f"--reuid={uid}", f"--regid={gid}",
                     "--clear-groups", "--", *bwrap]  # fmt: skip
        if limits:
            bwrap = ["/usr/bin/prlimit", *limits, "--", *bwrap]
        if self._cgroup is None or not self._cgroup.dirs:
            return bwrap
        join = " && ".join(f"echo $$ > {shlex.quote(f)}" for f in self._cgroup.procs_files)
        return ["/bin/sh", "-c", f'{join} && exec "$@"', "openforge-sandbox", *bwrap]

    async def exec(
        self,
        cmd: Sequence[str] | str,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``cmd`` in fresh namespaces over this sandbox's directories.

        On timeout the whole process tree is killed (killing bwrap tears down its PID
        namespace) and ``timed_out`` is set; a sandbox that could not start raises
        :class:`SandboxError`.
        """
        return await self.exec_as(
            cmd, self._env(env), cwd, timeout, stdin, on_output, self.view,
            self._backend.max_output,
        )  # fmt: skip

    async def exec_verifier(self, run: VerifierExec) -> VerifierRun:
        """Run a verifier where the agent's leftovers cannot steer it (``verifier.py``)."""
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        return await exec_local_verifier(self, run)

    async def exec_as(
        self,
        cmd: Sequence[str] | str,
        env: Mapping[str, str],
        cwd: str | None,
        timeout: float | None,
        stdin: bytes | None,
        on_output: OutputCallback | None,
        view: ExecView,
        max_output: int,
    ) -> ExecResult:
        """:meth:`exec` with the whole environment ``env``, seeing the sandbox as ``view``
        says, keeping ``max_output`` bytes per stream."""
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        status_r, status_w = os.pipe()
        os.set_blocking(status_r, False)
        block_r, block_w = os.pipe() if self._setns and view.gateway else (-1, -1)
        ids = view.ids
        if ids is not None and block_r >= 0:
            os.fchown(block_r, *ids)  # the gate reopens it through /proc/self/fd
        started: list[int] = []
        early = bytearray()  # status lines read while the exec ran

        def kill(pid: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            # bwrap's init does not reliably die with bwrap (its parent-death signal is lost
            # when it changes credentials, as it does run as the sandbox uid): kill it, and
            # with it the whole PID namespace.
            with contextlib.suppress(ProcessLookupError, KeyError, ValueError):
                os.kill(int(self._read_status(status_r, early)["child-pid"]), signal.SIGKILL)

        def register(pid: int) -> None:
            started.append(pid)
            self._running[pid] = functools.partial(kill, pid)

        try:
            argv = self._argv(cmd, cwd, status_w, block_r, view)
            task = asyncio.ensure_future(run_streaming(
                argv, env=env, stdin=stdin, timeout=timeout, on_output=on_output,
                max_output=max_output, kill=kill, on_start=register,
                pass_fds=(status_w,) if block_r < 0 else (status_w, block_r), pipe_owner=ids,
            ))  # fmt: skip
            server = None
            try:
                if block_w >= 0:
                    server = await self._gateway_port(task, status_r, early)
                    os.write(block_w, b"go\n")
                result = await task
            except BaseException:
                if not task.done():
                    task.cancel()  # run_streaming kills the process tree (``kill``)
                    with contextlib.suppress(BaseException):
                        await task
                raise
            finally:
                for pid in started:
                    self._running.pop(pid, None)
                if server is not None and self.relay is not None:
                    self.relay.stop(server)
            status = self._read_status(status_r, early)
        except OSError as exc:
            raise SandboxError(f"sandbox {self.id}: cannot start bwrap: {exc}") from exc
        finally:
            for fd in (status_r, status_w, block_r, block_w):
                if fd >= 0:
                    os.close(fd)
        if result.timed_out and "child-pid" in status:
            await wait_gone(int(status["child-pid"]))
        # An exec that close() killed before bwrap was up is killed, not failed to set up.
        if "child-pid" not in status and not result.timed_out and not self._closed:
            err = result.stderr.decode(errors="replace").strip()
            raise SandboxError(f"sandbox {self.id}: bwrap failed to set up: {err}")
        return result

    def root_of(self, path: str) -> Path:
        """The host directory shown at ``path`` (the workdir, HOME or /tmp)."""
        return self._roots[path]

    def verifier_dir(self) -> Path:
        """Where this sandbox's verifier runs keep their files: beside its disk, not on it."""
        return self._backend.data_root / self.id / "verifier"

    async def kill_all(self) -> int:
        """Kill every process of every exec still running, and any left in the sandbox's
        cgroup; wait until they are gone. How many execs were running."""
        running = len(self._running)
        for kill in list(self._running.values()):
            kill()
        if self._cgroup is not None and self._cgroup.dirs:
            await self._backend.offload("teardown", self._cgroup.kill)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while self._running and loop.time() < deadline:
            await asyncio.sleep(0.01)
        return running

    async def _gateway_port(
        self, task: asyncio.Future[ExecResult], status_fd: int, early: bytearray
    ) -> asyncio.AbstractServer | None:
        """Once bwrap reports its child, listen on the gateway's port in the child's netns."""
        assert self.relay is not None
        loop = asyncio.get_running_loop()
        child: asyncio.Future[int] = loop.create_future()

        def readable() -> None:
            with contextlib.suppress(BlockingIOError):
                early.extend(os.read(status_fd, 65536))
            for line in bytes(early).splitlines(keepends=True):
                if line.endswith(b"\n") and b"child-pid" in line and not child.done():
                    child.set_result(int(orjson.loads(line)["child-pid"]))

        loop.add_reader(status_fd, readable)
        try:
            waits: set[asyncio.Future[Any]] = {child, task}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(status_fd)
        if not child.done():
            child.cancel()
            return None  # bwrap ended before its child started: reported by the caller
        sock = listen_in(child.result(), self._inside_port)
        return await self.relay.serve_socket(sock)

    @staticmethod
    def _read_status(fd: int, early: bytearray) -> dict[str, Any]:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(fd, 65536):
                early.extend(chunk)  # kept: a later call sees these lines too
        status: dict[str, Any] = {}
        for line in bytes(early).splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                status.update(orjson.loads(line))
        return status

    async def put(self, files: Mapping[str, bytes]) -> None:
        """Write files: relative to the workdir, or absolute under workdir, ~ or /tmp."""
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        await self._backend.offload(
            "io", write_files, files, self._roots, self.workdir, SANDBOX_HOME, self._backend.ids
        )

    async def get(self, paths: Sequence[str]) -> dict[str, bytes]:
        """Read files; missing paths are absent; escaping paths raise ``PathEscape``."""
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed")
        return await self._backend.offload(
            "io", read_files, paths, self._roots, self.workdir, SANDBOX_HOME
        )

    async def close(self) -> None:
        """Kill every process of every exec, remove the cgroup and the directory."""
        if self._closed:
            return
        self._closed = True
        for kill in list(self._running.values()):
            kill()
        if self.relay is not None:
            await self.relay.close()
        self._backend.forget(self.id)
        await self._backend.offload("teardown", self._remove)

    def _remove(self) -> None:
        if self._cgroup is not None:
            self._cgroup.remove()
        self._backend.remove_dirs(self.id)


class LocalBackend:
    """Creates :class:`LocalSandbox` es under ``root`` (default: $TMPDIR/openforge-sandboxes).

    ``sandbox_uid``: the host uid (and gid) that uid 0 inside maps to. "auto": when run as
    root, :func:`unprivileged_ids`; otherwise the caller's own uid. "caller": always the
    caller's (as root, uid 0 inside is host root: for trusted code only). An int: that uid
    and gid (root only). ``disk``: "loop" gives each sandbox a filesystem of ``disk_mb``
    (the task's, else ``default_disk_mb``) holding all it can write (root only); "rlimit"
    only caps each file's size at the task's ``disk_mb``; "auto": "loop" where it can be.
    """

    name = "local"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        bwrap: str | None = None,
        cgroups: bool = True,
        max_output: int = DEFAULT_MAX_OUTPUT,
        gateway_relay: Literal["auto", "setns", "forwarder"] = "auto",
        sandbox_uid: int | Literal["auto", "caller"] = "auto",
        disk: Literal["auto", "loop", "rlimit"] = "auto",
        default_disk_mb: int = DEFAULT_DISK_MB,
    ) -> None:
        found = bwrap or shutil.which("bwrap")
        if not found:
            raise SandboxError(
                "the local sandbox backend needs bubblewrap: apt-get install bubblewrap"
            )
        self.bwrap = found
        self.ids = self._sandbox_ids(sandbox_uid)
        # A verifier runs as another unprivileged uid than the sandbox's (none as non-root).
        self.verifier_ids = verifier_ids(self.ids)
        self.setpriv = shutil.which("setpriv") or "setpriv"
        if self.ids is not None and not shutil.which("setpriv"):
            raise SandboxError("the local sandbox backend run as root needs setpriv (util-linux)")
        if disk == "loop" and not loop_disks_available():
            raise SandboxError("disk='loop' needs root, /dev/loop-control and mkfs.ext4")
        self.loop_disks = disk != "rlimit" and loop_disks_available()
        if default_disk_mb < 1:
            raise SandboxError(f"default_disk_mb must be positive, got {default_disk_mb}")
        self.default_disk_mb = default_disk_mb
        default_root = Path(tempfile.gettempdir()) / "openforge-sandboxes"
        self.root = Path(root) if root is not None else default_root
        self.root.mkdir(parents=True, exist_ok=True)
        self.data_root = self._data_root()
        self.max_output = max_output
        # The system's Python runs the gateway forwarder inside (only /usr etc. are visible).
        self.python = shutil.which("python3", path=_DEFAULT_PATH)
        # Unix socket paths are limited to 108 bytes: the relays live in a short directory.
        self.relay_dir = Path(tempfile.gettempdir()) / f"openforge-gw-{os.getuid()}"
        self.relay_dir.mkdir(mode=0o700, exist_ok=True)
        if self.ids is not None:
            # bwrap, run as the sandbox uid, binds a socket from here: it must reach it (the
            # names are random and each socket is the sandbox uid's; listing stays closed).
            self.relay_dir.chmod(0o711)
        # "setns" (needs CAP_SYS_ADMIN): the host listens inside each exec's namespace, no
        # process inside. "forwarder": a small stdlib relay starts first in each exec.
        if gateway_relay == "auto":
            gateway_relay = "setns" if can_setns() else "forwarder"
        elif gateway_relay == "setns" and not can_setns():
            raise SandboxError("gateway_relay='setns' needs CAP_SYS_ADMIN (run as root)")
        self.relay_mode = gateway_relay
        self.system_mounts = _system_mounts()
        self.cgroups: CgroupLayout | None = detect_cgroups() if cgroups else None
        self._sandboxes: dict[str, LocalSandbox] = {}
        self._owner = f"{os.getpid()} {process_start(os.getpid())}"
        # Own threads for file transfer and teardown: the loop's default pool is small and
        # shared with the caller's blocking work, and a sandbox op must not queue behind it.
        self._pools: dict[str, ThreadPoolExecutor] = {}

    @staticmethod
    def _sandbox_ids(sandbox_uid: int | Literal["auto", "caller"]) -> tuple[int, int] | None:
        if sandbox_uid == "caller":
            return None
        if os.geteuid() != 0:
            if sandbox_uid == "auto":
                return None  # the caller is unprivileged already
            raise SandboxError("sandbox_uid needs root: run as the caller's uid instead")
        if sandbox_uid == "auto":
            return unprivileged_ids()
        if sandbox_uid <= 0:
            raise SandboxError(f"sandbox_uid must be an unprivileged uid, got {sandbox_uid}")
        return (sandbox_uid, sandbox_uid)

    def _data_root(self) -> Path:
        """Where the sandboxes' writable directories go. Run as the caller: under ``root``.
        Run as the sandbox uid: bwrap, as that uid, opens them by path, so every directory
        above them must stay searchable by others; a root the caller chose may not be (under
        /root, or pytest's 0700 temporary directories, whose mode pytest resets at any
        session's start), so they live in a directory of their own in $TMPDIR (else /tmp),
        and ``root/<id>/data`` links to them."""
        if self.ids is None:
            return self.root
        places = [Path(tempfile.gettempdir()), Path("/tmp")]
        for place in places:
            alt = place / "openforge-sandbox-data"
            if _unreachable(place, self.ids[0]) is None:
                alt.mkdir(exist_ok=True)
                alt.chmod(0o711)  # others may pass, not list
                return alt
        raise SandboxError(
            f"the sandbox uid {self.ids[0]} can search neither of {[str(p) for p in places]}"
        )

    def data_dir(self, sid: str) -> Path:
        """Where sandbox ``sid``'s workspace, home and tmp live on the host."""
        return self.data_root / sid / "fs" if self.loop_disks else self.data_root / sid

    def remove_dirs(self, sid: str) -> None:
        """Unmount sandbox ``sid``'s own disk, if any, and remove its directories (blocking)."""
        try:
            remove_disk(self.data_root / sid / "fs")
        except DiskError as exc:
            log.warning("sandbox %s: %s", sid, exc)
        shutil.rmtree(self.data_root / sid, ignore_errors=True)
        shutil.rmtree(self.root / sid, ignore_errors=True)

    async def offload(self, kind: str, fn: Callable[..., _T], *args: Any) -> _T:
        """Run blocking ``fn`` in this backend's own ``kind`` ("io"/"teardown") threads."""
        pool = self._pools.get(kind)
        if pool is None:
            pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"openforge-sb-{kind}")
            self._pools[kind] = pool
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def create(self, spec: SandboxSpec) -> LocalSandbox:
        """Make the sandbox's directories and cgroup; raise :class:`SandboxError` on failure."""
        if not spec.workdir.startswith("/") or spec.workdir in ("/", "/tmp", SANDBOX_HOME):
            raise SandboxError(f"workdir must be an absolute path of its own, not {spec.workdir!r}")
        if spec.network == "gateway" and spec.gateway_url:
            try:
                gateway_address(spec.gateway_url)
            except ValueError as exc:
                raise SandboxError(str(exc)) from exc
        sid = "sb-" + secrets.token_hex(6)
        cgroup = Cgroup(self.cgroups, f"openforge-{sid}") if self.cgroups else None
        try:
            if self.loop_disks:  # mkfs and mount: tens of milliseconds, off the loop
                await self.offload("io", self._make, sid, spec, cgroup)
            else:
                # Inline on purpose: four mkdirs, one small write and a few cgroupfs writes
                # take well under a millisecond, less than a hop to a thread pool and back.
                self._make(sid, spec, cgroup)
        except OSError as exc:
            await self.offload("teardown", self.remove_dirs, sid)
            if cgroup is not None:
                cgroup.remove()
            raise SandboxError(f"cannot create sandbox {sid}: {exc}") from exc
        box = LocalSandbox(self, sid, spec, cgroup)
        self._sandboxes[sid] = box
        if box.relay is not None and box.relay.path is not None:
            try:
                if self.python is None:
                    raise OSError("network='gateway' needs python3 in /usr/bin or /bin")
                await box.relay.serve_unix()
                if self.ids is not None and box.relay.path is not None:
                    os.chown(box.relay.path, *self.ids)  # the forwarder inside connects
            except OSError as exc:
                await box.close()
                raise SandboxError(f"cannot create sandbox {sid}: gateway relay: {exc}") from exc
        return box

    def _make(self, sid: str, spec: SandboxSpec, cgroup: Cgroup | None) -> None:
        d = self.root / sid
        d.mkdir()
        (d / "owner").write_text(self._owner)
        data = self.data_dir(sid)
        if self.data_root != self.root:
            (self.data_root / sid).mkdir()
            (d / "data").symlink_to(data)
        if self.loop_disks:
            size = spec.disk_mb or self.default_disk_mb
            make_disk(d / "disk.img", data, size, self.ids or (0, 0))
        for sub in ("workspace", "home", "tmp"):
            (data / sub).mkdir()
            if self.ids is not None:
                os.chown(data / sub, *self.ids)
        (data / "tmp").chmod(0o1777)
        if cgroup is not None and (spec.pids or spec.memory_mb or spec.cpu):
            cgroup.create(spec.memory_mb, spec.pids, spec.cpu)
        elif cgroup is not None:
            cgroup.dirs.clear()  # no limits asked for: no cgroup to make or join

    def forget(self, sid: str) -> None:
        """Drop a closed sandbox from the backend's table."""
        self._sandboxes.pop(sid, None)

    async def close(self) -> None:
        """Close every sandbox still open and stop this backend's threads."""
        await asyncio.gather(*(box.close() for box in list(self._sandboxes.values())))
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=False)

    async def reap_orphans(self) -> list[str]:
        """Remove sandboxes left by processes that died without closing them (crash safety)."""
        return await self.offload("teardown", self._reap)

    def _reap(self) -> list[str]:
        reaped: list[str] = []
        for d in self.root.iterdir():
            try:
                pid, start = (d / "owner").read_text().split()
            except (OSError, ValueError):
                continue
            if process_start(int(pid)) == start:
                continue  # its owner is alive
            if self.cgroups is not None:
                Cgroup(self.cgroups, f"openforge-{d.name}").remove()
            (self.relay_dir / f"{d.name}.sock").unlink(missing_ok=True)
            self.remove_dirs(d.name)
            reaped.append(d.name)
        return reaped
