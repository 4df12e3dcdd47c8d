"""The local backend's verifier run (``LocalSandbox.exec_verifier``; see ``verifier.py``).

Run as root, the verifier is a third uid: not root, not the sandbox's (:func:`verifier_ids`).
Its files and run area live in the sandbox's host directory beside, not on, the agent's
disk, so an agent that filled its disk cannot stop them being made; the verifier's
directory is bind-mounted read-only where it goes (a mount point cannot be renamed away by
the agent's code that the verifier runs).
Its ``/tmp`` is fresh and it has no network unless the task's is ``open`` (no gateway).
Run unprivileged, the verifier is the caller's uid, as the agent is: the rest still holds.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from openforge.sandboxes.base import ExecResult, OutputCallback, SandboxError, SandboxSpec
from openforge.sandboxes.runtime import SANDBOX_HOME
from openforge.sandboxes.verifier import (
    CHANNEL_ENV,
    VERIFIER_RUN,
    RunArea,
    VerifierExec,
    VerifierRun,
    clear_path,
    hand_over,
    make_fresh_tree,
    make_run_area,
    read_channel,
    read_outputs,
    restore_dir_mode,
)

__all__ = [
    "ExecView",
    "VerifierBackend",
    "VerifierBox",
    "exec_local_verifier",
    "unprivileged_ids",
    "verifier_ids",
]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class ExecView:
    """How one exec sees a local sandbox: the host uid and gid it runs as (None: the
    caller's), the host directories bound where (``rw`` or read-only), in mount order, and
    whether it reaches the gateway."""

    ids: tuple[int, int] | None
    binds: tuple[tuple[str, str, bool], ...]
    gateway: bool = True


_T = TypeVar("_T")


class VerifierBackend(Protocol):
    """What a verifier run needs of the local backend (``LocalBackend`` is one): the
    ``python3`` the run area links, the agent's and the verifier's host ids, its threads."""

    python: str | None
    ids: tuple[int, int] | None
    verifier_ids: tuple[int, int] | None

    async def offload(self, kind: str, fn: Callable[..., _T], *args: Any) -> _T: ...


class VerifierBox(Protocol):
    """What a verifier run needs of a local sandbox (``LocalSandbox`` is one). Named here,
    below ``local.py``, so this module need not import the backend that calls it."""

    id: str
    spec: SandboxSpec
    workdir: str

    @property
    def _backend(self) -> VerifierBackend: ...

    def root_of(self, path: str) -> Path: ...

    def verifier_dir(self) -> Path: ...

    async def kill_all(self) -> int: ...

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
    ) -> ExecResult: ...


_NOBODY = 65534


def _subordinate(path: str) -> tuple[int, int] | None:
    """The first id and the size of root's subordinate range in ``path``."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(path).read_text().splitlines():
            name, start, count = line.strip().split(":")
            if name in ("root", "0") and int(count) > 0:
                return int(start), int(count)
    return None


def unprivileged_ids() -> tuple[int, int]:
    """The host uid and gid a root caller's sandboxes run as.

    The first id of root's subordinate ranges (/etc/subuid, /etc/subgid) when it has them
    (ids set aside for exactly this, owned by no account), else nobody (65534).
    """
    uid, gid = _subordinate("/etc/subuid"), _subordinate("/etc/subgid")
    return (_NOBODY if uid is None else uid[0], _NOBODY if gid is None else gid[0])


def verifier_ids(sandbox_ids: tuple[int, int] | None) -> tuple[int, int] | None:
    """The host uid and gid a root caller's verifiers run as: the id after the sandbox's in
    root's subordinate ranges when they hold two, else 65533 (else 65532, when the sandbox
    is 65533). None when the sandbox runs as the caller (no other uid to use)."""
    if sandbox_ids is None:
        return None
    uid, gid = sandbox_ids
    sub_u, sub_g = _subordinate("/etc/subuid"), _subordinate("/etc/subgid")
    if sub_u and sub_g and uid == sub_u[0] and gid == sub_g[0] and min(sub_u[1], sub_g[1]) > 1:
        return uid + 1, gid + 1
    other = 65533 if uid != 65533 else 65532
    return other, other


def _inside(workdir: str, path: str) -> str:
    return path if path.startswith("/") else os.path.normpath(os.path.join(workdir, path))


def _mount_point(ws: Path, rel: str) -> tuple[Path, list[str]]:
    """An empty directory at ``rel`` under ``ws``, each component a real directory (a
    symlink or file the agent put on the way is removed, never followed: this runs as
    host root)."""
    notes: list[str] = []
    cur = ws
    parts = Path(rel).parts
    for i, part in enumerate(parts):
        cur = cur / part
        last = i == len(parts) - 1
        try:
            st = cur.lstat()
        except FileNotFoundError:
            st = None
        if st is not None and (last or not stat.S_ISDIR(st.st_mode)):
            notes += [n for n in (clear_path(cur),) if n]
            st = None
        if st is None:
            cur.mkdir(mode=0o755)
    return cur, notes


@dataclass(slots=True)
class _Prepared:
    area: RunArea
    binds: list[tuple[str, str, bool]]
    notes: list[str]
    mount_point: Path | None  # the empty directory in the workdir under the bind
    handed: bool  # the agent's directories were given to the verifier's uid


def _prepare(box: VerifierBox, run: VerifierExec, vids: tuple[int, int] | None) -> _Prepared:
    """Undo what the agent did to the verifier's paths and make its own (blocking)."""
    backend = box._backend
    own = box.verifier_dir()
    clear_path(own)
    own.mkdir(mode=0o755)
    notes: list[str] = []
    ws, home = box.root_of(box.workdir), box.root_of(SANDBOX_HOME)
    notes += [n for n in (restore_dir_mode(ws), restore_dir_mode(home)) if n]
    vdir = _inside(box.workdir, run.dir)
    vhost = own / "verify"
    make_fresh_tree(vhost, run.files, None)
    mount_point = None
    if vdir.startswith(box.workdir.rstrip("/") + "/"):
        mount_point, more = _mount_point(ws, os.path.relpath(vdir, box.workdir))
        notes += more
    area = make_run_area(own / "run", backend.python, vids)
    binds = [
        (str(area.root / "tmp"), "/tmp", True),
        (str(home), SANDBOX_HOME, True),
        (str(ws), box.workdir, True),
        (str(vhost), vdir, False),
        (str(area.root), VERIFIER_RUN, True),
    ]
    if run.outputs is not None:
        make_fresh_tree(own / "outputs", {}, vids)
        binds.append((str(own / "outputs"), run.outputs, True))
    handed = vids is not None and vids != backend.ids
    if handed:
        assert vids is not None
        for path in (ws, home):
            hand_over(path, vids)
    return _Prepared(area, binds, notes, mount_point, handed)


def _finish(box: VerifierBox, run: VerifierExec, prep: _Prepared) -> tuple[bytes, dict[str, bytes]]:
    """Read the channel and outputs, give the agent's directories back, remove ours."""
    channel = read_channel(prep.area.channel_fd)
    own = box.verifier_dir()
    outputs = read_outputs(own / "outputs") if run.outputs is not None else {}
    if prep.mount_point is not None:
        with contextlib.suppress(OSError):
            clear_path(prep.mount_point)
    agent = box._backend.ids
    if prep.handed and agent is not None:
        for path in (box.root_of(box.workdir), box.root_of(SANDBOX_HOME)):
            hand_over(path, agent)
    clear_path(own)
    return channel, outputs


async def exec_local_verifier(box: VerifierBox, run: VerifierExec) -> VerifierRun:
    """Kill what the agent left, prepare, run ``run`` as the verifier uid, read its channel."""
    backend = box._backend
    notes: list[str] = []
    killed = await box.kill_all()
    if killed:
        notes.append(f"killed {killed} exec(s) of the agent's still running")
    vids = backend.verifier_ids if run.own_uid else backend.ids
    try:
        prep = await backend.offload("io", _prepare, box, run, vids)
    except OSError as exc:
        raise SandboxError(f"sandbox {box.id}: cannot prepare the verifier: {exc}") from exc
    notes += prep.notes
    env = {
        "LANG": "C.UTF-8",
        "USER": "verifier",
        **prep.area.env(),  # HOME and TMPDIR: a run's env may set its own
        **box.spec.env,
        **run.env,
        "PATH": f"{VERIFIER_RUN}/bin:" + run.env.get("PATH", box.spec.env.get("PATH", _PATH)),
        CHANNEL_ENV: prep.area.env()[CHANNEL_ENV],
        "OPENFORGE_VERIFY_DIR": _inside(box.workdir, run.dir),
        "OPENFORGE_AGENT_HOME": SANDBOX_HOME,
        "OPENFORGE_SANDBOX_ID": box.id,
    }
    view = ExecView(vids, tuple(prep.binds), gateway=False)
    try:
        result = await box.exec_as(
            run.cmd, env, None, run.timeout, None, None, view, run.max_output
        )
    finally:
        await box.kill_all()  # what the verifier's children left
        channel, outputs = await backend.offload("io", _finish, box, run, prep)
    return VerifierRun(result, channel, outputs, notes, None if vids is None else vids[0])
