"""The local backend run as root: uid 0 inside is an unprivileged host uid, and each sandbox
has a disk of its own. Real bubblewrap, real loop-mounted filesystems."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxSpec
from openforge.sandboxes.disk import RESERVE_MB, loop_disks_available
from openforge.sandboxes.local import LocalBackend, unprivileged_ids

# bubblewrap is installed by scripts/setup.sh: without it these tests fail (creating a sandbox
# says so), they do not skip. Only a caller that is not root has nothing to remap.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only a root caller's sandboxes are remapped and get disks"
)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[LocalBackend]:
    b = LocalBackend(root=tmp_path / "sandboxes")
    yield b
    await b.close()


def _mounts_under(path: Path) -> list[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if str(path) in line]


async def test_root_inside_is_unprivileged_outside(backend: LocalBackend) -> None:
    uid, gid = unprivileged_ids()
    assert uid != 0 and backend.ids == (uid, gid)
    # A root-only file in a directory every sandbox sees (read-only) from the host.
    secret = Path("/etc") / f"openforge-test-secret-{secrets.token_hex(4)}"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"host root's secret\n")
        os.close(fd)
        assert secret.stat().st_uid == 0 and secret.stat().st_mode & 0o777 == 0o600
        box = await backend.create(SandboxSpec())
        res = await box.exec(f"id -u; cat /proc/self/uid_map; cat {secret}")
        out = res.stdout.decode().split()
        assert out[0] == "0"  # root inside ...
        assert out[1:4] == ["0", str(uid), "1"]  # ... is the unprivileged uid outside
        assert res.exit_code != 0 and "Permission denied" in res.stderr.decode()
        assert b"secret" not in res.stdout
    finally:
        secret.unlink()


async def test_workspace_still_belongs_to_the_sandbox(backend: LocalBackend) -> None:
    uid, gid = unprivileged_ids()
    box = await backend.create(SandboxSpec())
    await box.put({"src/main.py": b"print('v1')\n", "~/.config/tool.toml": b"x = 1\n"})
    # The agent edits what it was handed, writes new files and uses its stdio by path.
    agent = await box.exec(
        "echo \"print('v2')\" > src/main.py && mkdir -p out && echo done > out/result.txt"
        " && echo y >> ~/.config/tool.toml && echo tmp > /tmp/t && cat /dev/stdin"
        " && echo to-stderr > /dev/stderr",
        stdin=b"from stdin\n",
    )
    assert agent.exit_code == 0, agent.stderr
    assert agent.stdout == b"from stdin\n" and agent.stderr == b"to-stderr\n"
    # A verifier reads what the agent left, inside and through get().
    verifier = await box.exec("python3 src/main.py && cat out/result.txt")
    assert verifier.stdout == b"v2\ndone\n"
    got = await box.get(["out/result.txt", "~/.config/tool.toml"])
    assert got == {"out/result.txt": b"done\n", "~/.config/tool.toml": b"x = 1\ny\n"}
    host = backend.data_dir(box.id) / "workspace"
    for p in (host / "src", host / "src" / "main.py", host / "out" / "result.txt"):
        assert (p.stat().st_uid, p.stat().st_gid) == (uid, gid)


@pytest.mark.skipif(not loop_disks_available(), reason="no loop devices on this host")
async def test_disk_limit_is_enforced_and_leaves_the_host_alone(
    backend: LocalBackend, tmp_path: Path
) -> None:
    box = await backend.create(SandboxSpec(disk_mb=64))
    image = box.dir / "disk.img"
    free_before = shutil.disk_usage(tmp_path).free
    # Workspace, HOME and /tmp share the one limit: 40 MB in /tmp leaves ~24 for the rest.
    res = await box.exec(
        "dd if=/dev/zero of=/tmp/a bs=1M count=40 status=none && "
        "dd if=/dev/zero of=$HOME/b bs=1M count=200 status=none; echo rc=$?; "
        "du -sm /tmp/a $HOME/b"
    )
    assert "No space left on device" in res.stderr.decode()
    assert "rc=1" in res.stdout.decode()
    sizes = [int(line.split()[0]) for line in res.stdout.decode().splitlines()[1:]]
    assert sum(sizes) <= 64
    # What the host holds for the sandbox is bounded by the image (limit + root's reserve).
    assert image.stat().st_blocks * 512 <= (64 + RESERVE_MB) * 1024 * 1024
    assert free_before - shutil.disk_usage(tmp_path).free <= (64 + RESERVE_MB) * 1024 * 1024
    # The orchestrator can still hand the verifier its files (root's reserve) ...
    await box.put({".verify/check.py": b"print('{\"reward\": 0.0}')\n"})
    check = await box.exec("python3 .verify/check.py")
    assert check.stdout == b'{"reward": 0.0}\n'
    # ... and closing unmounts and removes everything.
    await box.close()
    assert not box.dir.exists()
    assert _mounts_under(backend.root) == []


async def test_a_root_the_sandbox_uid_cannot_reach_keeps_data_elsewhere(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    backend = LocalBackend(root=hidden / "sandboxes")
    try:
        assert backend.data_root != backend.root
        box = await backend.create(SandboxSpec(disk_mb=16))
        res = await box.exec("echo ok > f && cat f")
        assert res.stdout == b"ok\n"
        assert (backend.data_dir(box.id) / "workspace" / "f").read_bytes() == b"ok\n"
        await box.close()
        assert not (backend.data_root / box.id).exists() and not box.dir.exists()
    finally:
        await backend.close()
