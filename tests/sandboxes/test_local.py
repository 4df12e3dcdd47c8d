"""The local (bubblewrap) backend with real processes."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxError, SandboxSpec, create_backend
from openforge.sandboxes.fspaths import PathEscape
from openforge.sandboxes.limits import detect_cgroups
from openforge.sandboxes.local import LocalBackend
from openforge.sandboxes.netns import can_setns

from .gateway_probe import check_gateway_only, gateway_server, tcp_server

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    b = create_backend("local", root=tmp_path / "sandboxes")
    assert isinstance(b, LocalBackend)
    yield b
    await b.close()


def _procs_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry))
    return found


async def test_exec_streams_output_and_exit_code(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    chunks: list[tuple[str, bytes]] = []

    async def on_output(stream: str, chunk: bytes) -> None:
        chunks.append((stream, chunk))

    result = await box.exec(
        "echo one; echo two >&2; cat; pwd; exit 3", stdin=b"in\n", on_output=on_output
    )
    assert result.exit_code == 3
    assert not result.timed_out
    assert result.stdout == b"one\nin\n/workspace\n"
    assert result.stderr == b"two\n"
    assert b"".join(c for s, c in chunks if s == "stdout") == result.stdout
    assert b"".join(c for s, c in chunks if s == "stderr") == result.stderr


async def test_argv_env_cwd_and_home(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec(env={"A": "spec"}))
    await box.put({"sub/f.txt": b"x"})
    result = await box.exec(
        ["sh", "-c", 'echo "$A $B $HOME"; ls; touch ~/h && echo home-ok'],
        env={"B": "exec"},
        cwd="sub",
    )
    assert result.stdout.decode().splitlines() == ["spec exec /home/sandbox", "f.txt", "home-ok"]
    assert (await box.get(["~/h"])) == {"~/h": b""}


async def test_system_is_read_only_and_secrets_masked(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    result = await box.exec("touch /usr/x 2>&1; cat /etc/shadow | wc -c; echo $$")
    out = result.stdout.decode().splitlines()
    assert "Read-only file system" in out[0]
    assert out[1] == "0"
    assert out[2] == "2"  # PID namespace: bwrap's init is 1, the shell is 2


async def test_timeout_kills_the_whole_tree(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    marker = "of-marker-" + secrets.token_hex(4)
    sleeper = f"python3 -c 'import time; time.sleep(300)' {marker}"
    # A background child, one in its own session, and the foreground one.
    result = await box.exec(f"{sleeper} & setsid {sleeper} & {sleeper}", timeout=1.0)
    assert result.timed_out
    assert result.exit_code == 137
    assert _procs_with(marker) == []


async def test_close_kills_running_exec_and_removes_dir(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    marker = "of-marker-" + secrets.token_hex(4)
    await box.put({"f": b"1"})
    task = asyncio.create_task(box.exec(f"python3 -c 'import time; time.sleep(300)' {marker}"))
    while not _procs_with(marker):
        await asyncio.sleep(0.02)
    await box.close()
    result = await task
    assert result.exit_code != 0
    assert not box.dir.exists()
    assert _procs_with(marker) == []
    await box.close()  # idempotent
    with pytest.raises(SandboxError):
        await box.exec("true")


async def test_put_get_refuse_escapes(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    await box.put({"a/b.txt": b"B", "/workspace/c.txt": b"C", "/tmp/t": b"T"})
    got = await box.get(["a/b.txt", "/workspace/c.txt", "/tmp/t", "missing"])
    assert got == {"a/b.txt": b"B", "/workspace/c.txt": b"C", "/tmp/t": b"T"}
    for bad in ("../x", "a/../../x", "/etc/passwd", "/usr/bin/x", ""):
        with pytest.raises(PathEscape):
            await box.put({bad: b"no"})
        with pytest.raises(PathEscape):
            await box.get([bad])
    await box.exec("ln -s /etc out && ln -s / root && ln -s a inside")
    for bad in ("out/passwd", "root/etc/passwd"):
        with pytest.raises(PathEscape):
            await box.get([bad])
    for bad in ("out/newfile", "out/sub/newfile", "root/x"):
        with pytest.raises(PathEscape):
            await box.put({bad: b"no"})
    assert not Path("/etc/newfile").exists() and not Path("/etc/sub").exists()
    assert await box.get(["inside/b.txt"]) == {"inside/b.txt": b"B"}


_PROBE = b"""
import socket, sys
for port in sys.argv[1:]:
    try:
        s = socket.create_connection(("127.0.0.1", int(port)), 5)
        print(s.recv(2))
    except OSError as e:
        print("refused", e)
"""


async def test_network_none_and_open(backend: LocalBackend) -> None:
    server = await tcp_server()
    port = str(server.sockets[0].getsockname()[1])
    async with server:
        closed = await backend.create(SandboxSpec(network="none", gateway_url="http://x:1"))
        assert closed.gateway_url is None
        await closed.put({"probe.py": _PROBE})
        blocked = await closed.exec(["python3", "probe.py", port], timeout=20)
        opened = await backend.create(SandboxSpec(network="open", gateway_url="http://g:9"))
        assert opened.gateway_url == "http://g:9"
        await opened.put({"probe.py": _PROBE})
        reached = await opened.exec(["python3", "probe.py", port], timeout=20)
    assert blocked.stdout.startswith(b"refused"), blocked
    assert reached.stdout.strip() == b"b'hi'", reached


@pytest.mark.parametrize("relay", ["setns", "forwarder"])
async def test_network_gateway_relays_only_the_gateway(tmp_path: Path, relay: str) -> None:
    if relay == "setns" and not can_setns():
        pytest.skip("setns relay needs CAP_SYS_ADMIN; the forwarder variant runs instead")
    backend = LocalBackend(root=tmp_path / "sandboxes", gateway_relay=relay)  # type: ignore[arg-type]
    other = await tcp_server()
    try:
        async with gateway_server() as port:
            box = await backend.create(
                SandboxSpec(network="gateway", gateway_url=f"http://localhost:{port}/v1")
            )
            assert box.gateway_url == f"http://127.0.0.1:{port}/v1"
            await check_gateway_only(box, other)
            # The command itself is the exec's process: its pid and exit status are its own.
            status = await box.exec("echo $$; exit 7")
            assert (status.stdout, status.exit_code) == (b"2\n", 7)
            relay_path = box.relay.path if box.relay else None
            await box.close()
            assert relay_path is None or not os.path.exists(relay_path)
    finally:
        await backend.close()
        other.close()


async def test_gateway_without_url_has_no_network(backend: LocalBackend) -> None:
    server = await tcp_server()
    async with server:
        box = await backend.create(SandboxSpec(network="gateway"))
        assert box.gateway_url is None
        await box.put({"probe.py": _PROBE})
        port = str(server.sockets[0].getsockname()[1])
        result = await box.exec(["python3", "probe.py", port], timeout=20)
    assert result.stdout.startswith(b"refused"), result
    with pytest.raises(SandboxError, match="gateway_url"):
        await backend.create(SandboxSpec(network="gateway", gateway_url="ftp://x"))


needs_cgroup = pytest.mark.skipif(
    detect_cgroups() is None,
    reason="no writable cgroup hierarchy here: pids/memory limits fall back to rlimits",
)


@needs_cgroup
async def test_pids_limit_caps_a_fork_bomb(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec(pids=16))
    bomb = (
        "python3 -c 'import os,time\n"
        "n=0\n"
        "for _ in range(200):\n"
        "  try:\n"
        "    if os.fork()==0: time.sleep(30); os._exit(0)\n"
        "    n+=1\n"
        "  except OSError: break\n"
        "print(n)'"
    )
    result = await box.exec(bomb, timeout=60)
    assert int(result.stdout) < 16


async def test_memory_hog_is_stopped(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec(memory_mb=64))
    hog = "python3 -c 'b=bytearray(512*1024*1024); b[::4096]=b\"x\"*(len(b)//4096); print(1)'"
    result = await box.exec(hog, timeout=60)
    assert result.exit_code != 0
    assert result.stdout == b""


async def test_setup_failure_is_a_sandbox_error(tmp_path: Path) -> None:
    backend = LocalBackend(root=tmp_path, bwrap="/bin/false")
    box = await backend.create(SandboxSpec())
    with pytest.raises(SandboxError, match="set up"):
        await box.exec("true")
    await backend.close()
    assert list(tmp_path.iterdir()) == []


async def test_reap_orphans_removes_dead_owners(backend: LocalBackend) -> None:
    live = await backend.create(SandboxSpec())
    dead = backend.root / "sb-dead"
    (dead / "workspace").mkdir(parents=True)
    (dead / "owner").write_text("999999999 1")
    assert await backend.reap_orphans() == ["sb-dead"]
    assert live.dir.exists() and not dead.exists()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_node_runs_inside(backend: LocalBackend) -> None:
    box = await backend.create(SandboxSpec())
    result = await box.exec(["node", "-e", "console.log(require('os').homedir())"], timeout=60)
    assert result.stdout == b"/home/sandbox\n", result
