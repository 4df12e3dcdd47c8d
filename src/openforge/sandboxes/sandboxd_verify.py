"""sandboxd's ``POST /verify``: a verifier run inside a container or pod (see ``verifier.py``).

Every process started since the environment was marked (``/procs/mark``: a task's services
stay) is the agent's: all are killed before and after the run (``procs.kill_leftovers``).
sandboxd is root in its container, as the agent's execs are, so the verifier runs as
:data:`CONTAINER_VERIFIER_IDS`, with the workdir and HOME handed to it for the run and back
to root after. Its directory is made
anew by root (read-only to it) and the workdir's own entry is root's and sticky for the run,
so the agent's code that a verifier runs cannot rename the directory away. Where sandboxd
is not root (a pod run as another user) the verifier runs as sandboxd's uid.

Request (JSON): ``cmd``, ``files`` ({relative path: base64}), ``dir``, ``env``, ``timeout``,
``max_output``, ``own_uid``, ``outputs``.
Answer: ``exit_code``, ``timed_out``, ``stdout``, ``stderr``, ``channel`` (base64),
``outputs`` ({name: base64}), ``notes``, ``uid``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openforge.sandboxes.procs import run_streaming
from openforge.sandboxes.runtime import RT_PYTHON
from openforge.sandboxes.verifier import (
    CHANNEL_ENV,
    CONTAINER_VERIFIER_IDS,
    VERIFIER_MAX_OUTPUT,
    VERIFIER_RUN,
    VerifierExec,
    clear_path,
    hand_over,
    make_fresh_tree,
    make_run_area,
    make_verify_dir,
    read_channel,
    read_outputs,
    restore_dir_mode,
)

__all__ = ["parse_verify", "run_verify"]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _b64map(value: Any, what: str) -> dict[str, bytes]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object")
    return {str(k): base64.b64decode(v) for k, v in value.items()}


def parse_verify(body: dict[str, Any]) -> VerifierExec:
    """The :class:`VerifierExec` a /verify body asks for (ValueError when malformed)."""
    cmd = body["cmd"]
    if not isinstance(cmd, str) and not (isinstance(cmd, list) and cmd):
        raise ValueError("cmd must be a string or a non-empty list")
    timeout = body.get("timeout")
    return VerifierExec(
        cmd=cmd if isinstance(cmd, str) else [str(a) for a in cmd],
        files=_b64map(body.get("files") or {}, "files"),
        dir=str(body.get("dir") or ".openforge-verify"),
        env={str(k): str(v) for k, v in (body.get("env") or {}).items()},
        timeout=None if timeout is None else float(timeout),
        max_output=int(body.get("max_output") or VERIFIER_MAX_OUTPUT),
        own_uid=bool(body.get("own_uid", True)),
        outputs=None if body.get("outputs") is None else str(body["outputs"]),
    )


def _real_dirs(path: Path) -> list[str]:
    """Make ``path``'s parents real directories (symlinks or files on the way removed)."""
    notes: list[str] = []
    cur = Path("/")
    for part in path.parts[1:-1]:
        cur = cur / part
        try:
            st = cur.lstat()
        except FileNotFoundError:
            cur.mkdir(mode=0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            notes += [n for n in (clear_path(cur),) if n]
            cur.mkdir(mode=0o755)
    return notes


def _python() -> str | None:
    """The Python a verifier's ``python3`` runs: the image's, else OpenForge's runtime one."""
    found = shutil.which("python3", path=_PATH)
    if found is None and os.path.exists(RT_PYTHON):
        return RT_PYTHON
    return found


def _prepare(
    run: VerifierExec, workdir: str, home: str, vids: tuple[int, int] | None
) -> tuple[dict[str, Any], Callable[[], dict[str, Any]]]:
    """Undo what the agent did to the verifier's paths and make its own (blocking): the
    exec's settings and the function that ends the run."""
    notes: list[str] = []
    agent = (os.getuid(), os.getgid())
    ws, hm = Path(workdir), Path(home)
    for d in (ws, hm):
        if d.is_symlink() or not d.is_dir():  # the agent is root here: it could
            notes += [n for n in (clear_path(d),) if n]
            d.mkdir(mode=0o755)
        notes += [n for n in (restore_dir_mode(d),) if n]
    vdir = Path(run.dir if run.dir.startswith("/") else os.path.join(ws, run.dir))
    notes += _real_dirs(vdir)
    notes += [n for n in (clear_path(vdir),) if n]  # before the hand-over: never the verifier's
    handed = vids is not None and vids != agent
    if handed and vids is not None:
        for d in (ws, hm):
            hand_over(d, vids)
        os.chown(ws, *agent)  # root's and sticky for the run: the verifier's directory in it
        os.chmod(ws, 0o1777)  # cannot be renamed away by what the verifier runs
    make_verify_dir(vdir, run.files)
    area = make_run_area(Path(VERIFIER_RUN), _python(), vids)
    if run.outputs is not None:
        notes += _real_dirs(Path(run.outputs))
        make_fresh_tree(Path(run.outputs), {}, vids)
    env = {
        "LANG": "C.UTF-8",
        "USER": "verifier",
        **area.env(),  # HOME and TMPDIR: a run's env may set its own
        **run.env,
        "PATH": f"{VERIFIER_RUN}/bin:" + run.env.get("PATH", _PATH),
        CHANNEL_ENV: area.env()[CHANNEL_ENV],
        "OPENFORGE_VERIFY_DIR": str(vdir),
        "OPENFORGE_AGENT_HOME": home,
    }

    def finish() -> dict[str, Any]:
        channel = read_channel(area.channel_fd)
        outputs = read_outputs(Path(run.outputs)) if run.outputs is not None else {}
        if handed:
            for d in (ws, hm):
                hand_over(d, agent)
            os.chmod(ws, 0o755)
        for gone in (str(vdir), VERIFIER_RUN):
            with contextlib.suppress(OSError):
                clear_path(Path(gone))
        return {"channel": channel, "outputs": outputs}

    return {"env": env, "cwd": str(ws), "notes": notes}, finish


async def run_verify(
    run: VerifierExec,
    workdir: str,
    home: str,
    kill_agent: Callable[[], int],
    kill: Callable[[int], None],
) -> dict[str, Any]:
    """Kill the agent's leftovers, prepare, run the verifier, and answer (see the module)."""
    notes: list[str] = []
    killed = await asyncio.to_thread(kill_agent)
    if killed:
        notes.append(f"killed {killed} process(es) the agent left")
    await asyncio.sleep(0.05)  # let the kernel finish the kills before paths are touched
    vids = CONTAINER_VERIFIER_IDS if run.own_uid and os.getuid() == 0 else None
    setup, finish = await asyncio.to_thread(_prepare, run, workdir, home, vids)
    notes += setup["notes"]
    argv = ["/bin/sh", "-c", run.cmd] if isinstance(run.cmd, str) else list(run.cmd)
    try:
        result = await run_streaming(
            argv, env=setup["env"], cwd=setup["cwd"], timeout=run.timeout, kill=kill,
            max_output=run.max_output, pipe_owner=vids, run_as=vids,
        )  # fmt: skip
    finally:
        await asyncio.to_thread(kill_agent)  # what the verifier's children left
        ended = await asyncio.to_thread(finish)
    return {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "stdout": base64.b64encode(result.stdout).decode(),
        "stderr": base64.b64encode(result.stderr).decode(),
        "channel": base64.b64encode(ended["channel"]).decode(),
        "outputs": {k: base64.b64encode(v).decode() for k, v in ended["outputs"].items()},
        "notes": notes,
        "uid": None if vids is None else vids[0],
    }
