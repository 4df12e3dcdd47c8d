"""What the adapters share: config files in the sandbox, version checks, wrapped launches.

An adapter instance serves every rollout of a run at once, so it keeps no per-rollout
state: :meth:`configure` writes everything a rollout needs (its key, its URL) into the
sandbox, and the launch reads it back from there.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from openforge.guest.common import STATE_DIR
from openforge.harnesses.base import HarnessNotInstalled, Launch
from openforge.harnesses.portable import HARNESS_BIN
from openforge.sandboxes.base import Sandbox
from openforge.tasks.model import TaskTool  # one type: tasks declare, adapters expose

__all__ = [
    "ENV_DIR",
    "NpmPinned",
    "TaskTool",
    "Var",
    "check_version",
    "env_script",
    "find_files",
    "parse_jsonl",
    "path_line",
    "read_json",
    "read_with_sessions",
    "tools_markdown",
    "wrapped_launch",
]

# Under the sandbox's HOME: the adapters' env files, copied programs and captured output.
ENV_DIR = STATE_DIR
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[-.][0-9A-Za-z.]+)?")


@dataclass(frozen=True, slots=True)
class Var:
    """An argument taken from the env file at launch (``"$NAME"``), not a literal."""

    name: str


def tools_markdown(tools: Sequence[TaskTool], title: str = "Task tools") -> str:
    """The tools as a Markdown section the harness reads as project instructions."""
    lines = [f"# {title}", "", "Run these commands with your shell tool:", ""]
    for tool in tools:
        lines += [f"## {tool.name}", "", tool.description, "", "```sh", tool.usage, "```", ""]
    return "\n".join(lines)


def path_line(path: Sequence[str] = ()) -> str:
    """``export PATH=…`` putting the portable install's ``bin`` (present in container
    sandboxes only: ``harnesses/portable.py``), then ``path``, before the sandbox's own."""
    dirs = ":".join([HARNESS_BIN, *path])
    return f'export PATH="{dirs}:${{PATH:-/usr/local/bin:/usr/bin:/bin}}"\n'


def env_script(env: Mapping[str, str], path: Sequence[str] = ()) -> bytes:
    """A POSIX sh file exporting ``env`` and :func:`path_line` (what the launch sources)."""
    lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return (lines + path_line(path)).encode()


def wrapped_launch(
    home: str,
    env_file: str,
    argv: Sequence[str | Var],
    capture: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Launch:
    """``sh -c``: source ``env_file`` (under HOME) and run ``argv``.

    With ``capture`` (a path under HOME), stdout also goes to that file so :meth:`collect`
    can read the harness's stream-JSON transcript after the run; the exit status is kept.
    """
    cmd = " ".join(f'"${a.name}"' if isinstance(a, Var) else shlex.quote(a) for a in argv)
    script = f'. "{home}/{env_file}" || exit 97\n'
    if capture is None:
        script += f"exec {cmd}\n"
    else:
        # No pipe (dash has no pipefail): write the file, then replay it to stdout.
        out = shlex.quote(f"{home}/{capture}")
        script += f"{cmd} </dev/null >{out}\nrc=$?\ncat {out}\nexit $rc\n"
    return Launch(argv=["/bin/sh", "-c", script], env=dict(env or {}))


async def check_version(
    sandbox: Sandbox,
    name: str,
    argv: Sequence[str],
    pinned: str,
    install: str,
    env: Mapping[str, str] | None = None,
    path: Sequence[str] = (),
) -> str:
    """Run ``argv`` (a ``--version``) in the sandbox, found on the launch's ``PATH``
    (:func:`path_line`); the version, or HarnessNotInstalled."""
    script = path_line(path) + 'exec "$@"'
    res = await sandbox.exec(["/bin/sh", "-c", script, "sh", *argv], env=env, timeout=120)
    text = (res.stdout + res.stderr).decode(errors="replace")
    found = _VERSION.search(text) if res.exit_code == 0 else None
    if found is None:
        detail = text.strip().splitlines()[-1:] or [f"exit status {res.exit_code}"]
        raise HarnessNotInstalled(
            f"{name} {pinned} is not installed in the sandbox ({argv[0]}: {detail[0][:200]}); "
            f"install it with: {install}"
        )
    if found.group(0) != pinned:
        raise HarnessNotInstalled(
            f"{name} {found.group(0)} is installed but {pinned} is pinned; "
            f"install the pinned one with: {install}"
        )
    return found.group(0)


class NpmPinned:
    """The install and check of a harness published on npm at a pinned version: a global
    ``npm install`` of :attr:`package` at :attr:`version` (sandboxes see /usr read-only), and
    ``binary --version`` must say that version (run with :attr:`version_env`)."""

    name: ClassVar[str]
    version: ClassVar[str]
    package: ClassVar[str]
    version_env: ClassVar[Mapping[str, str] | None] = None
    binary: str

    def install_command(self) -> str:
        """The global npm install of the pinned version."""
        return f"npm install -g {self.package}@{self.version}"

    async def check(self, sandbox: Sandbox) -> None:
        """:class:`HarnessNotInstalled` unless ``binary --version`` says the pinned version."""
        await check_version(
            sandbox,
            self.name,
            [self.binary, "--version"],
            self.version,
            self.install_command(),
            env=self.version_env,
        )


def parse_jsonl(data: bytes) -> list[Any]:
    """JSON lines, skipping the ones that are not JSON (banners, torn last lines)."""
    out: list[Any] = []
    for line in data.splitlines():
        if line.strip():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    return out


async def find_files(sandbox: Sandbox, root: str, pattern: str = "*.jsonl") -> list[str]:
    """Paths of the regular files under ``root`` matching ``pattern`` (a harness's sessions)."""
    listing = await sandbox.exec(["find", root, "-name", pattern, "-type", "f"], timeout=60)
    return [p for p in listing.stdout.decode(errors="replace").splitlines() if p]


async def read_with_sessions(
    sandbox: Sandbox, path: str, sessions_root: str
) -> tuple[bytes, dict[str, list[Any]]] | None:
    """The file at ``path`` (``b""`` when absent) and every JSONL session file under
    ``sessions_root``, parsed; None when neither exists."""
    sessions = await find_files(sandbox, sessions_root)
    got = await sandbox.get([path, *sessions])
    if not got:
        return None
    return got.get(path, b""), {p: parse_jsonl(got[p]) for p in sessions if p in got}


async def read_json(sandbox: Sandbox, path: str, key: str) -> dict[str, Any] | None:
    """A JSON file the harness wrote, as a dict (a non-object under ``key``); None if absent.

    Text that is not JSON comes back under ``"unparsed"``: a torn transcript is still kept.
    """
    got = await sandbox.get([path])
    if path not in got:
        return None
    try:
        data = orjson.loads(got[path])
    except orjson.JSONDecodeError:
        return {"unparsed": got[path].decode(errors="replace")}
    return data if isinstance(data, dict) else {key: data}
