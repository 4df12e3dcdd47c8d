"""``Sandbox.exec_verifier`` on real sandboxes (local bubblewrap, podman): the verifier runs as
another uid than the agent, with a HOME, TMPDIR, PATH and python3 of its own, in a directory
made anew and read-only to it; its reward channel takes one opener; an absolute directory
and an ``outputs`` directory work (what Harbor's ``/tests`` and ``/logs/verifier`` need);
what the verifier's children leave is killed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from openforge.sandboxes import SandboxSpec, create_backend
from openforge.sandboxes.base import Sandbox
from openforge.sandboxes.local import LocalBackend
from openforge.sandboxes.verifier import VerifierExec

LIB = (Path(__file__).parents[2] / "src/openforge/guest/openforge_verify.py").read_bytes()

# Reports what the verifier sees, then claims the channel and tries a second opener.
PROBE = b"""import json, os, subprocess, sys
from openforge_verify import done
seen = {
    "uid": os.getuid(),
    "home": os.environ["HOME"],
    "path0": os.environ["PATH"].split(":")[0],
    "isolated": sys.flags.isolated,
    "cwd_on_path": os.getcwd() in sys.path or "" in sys.path,
    "vdir_writable": os.access(os.environ["OPENFORGE_VERIFY_DIR"], os.W_OK),
    "ws_writable": os.access(".", os.W_OK),
    "agent_file": open("mine.txt").read(),
    "child_channel": subprocess.run(
        ["sh", "-c", "ls /run/openforge-verifier/chan/ | wc -l"], capture_output=True,
        text=True).stdout.strip(),
}
done(True, **seen)
"""


@pytest.fixture(params=["local", "podman"])
async def box(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[int | None, Sandbox]]:
    """The sandbox and the uid its agent runs as (in the verifier's terms; None: unknown)."""
    if request.param == "podman":
        request.getfixturevalue("podman_images")
        backend = create_backend("podman")
    else:
        backend = create_backend("local", root=tmp_path / "boxes")
    sandbox = await backend.create(SandboxSpec(network="none"))
    agent = 0 if request.param == "podman" else None
    if isinstance(backend, LocalBackend) and backend.ids is not None:
        agent = backend.ids[0]
    try:
        yield agent, sandbox
    finally:
        await sandbox.close()
        await backend.close()


async def test_the_verifier_is_not_the_agent(box: tuple[int | None, Sandbox]) -> None:
    agent, sandbox = box
    await sandbox.put({"mine.txt": b"hidden\n"})
    await sandbox.exec("chmod 600 mine.txt; (sleep 600 >/dev/null 2>&1 &); mkdir .openforge-verify")
    run = await sandbox.exec_verifier(
        VerifierExec(
            "python3 .openforge-verify/probe.py",
            {"openforge_verify.py": LIB, "probe.py": PROBE},
            timeout=60,
        )
    )
    assert run.result.exit_code == 0, run
    lines = run.channel.decode().splitlines()
    assert json.loads(lines[0]) == {"openforge_verify": 1}
    seen = json.loads(lines[-1])["details"]
    assert run.uid is not None and seen["agent_file"] == "hidden\n"
    if agent is not None:  # root: a uid of its own
        assert run.uid not in (0, agent), run
    assert seen["home"] == "/run/openforge-verifier/home"
    assert seen["path0"] == "/run/openforge-verifier/bin" and seen["isolated"] == 1
    assert not seen["cwd_on_path"] and not seen["vdir_writable"] and seen["ws_writable"]
    assert seen["child_channel"] == "0"  # claimed: its name is gone
    assert any("removed the directory" in n for n in run.notes), run.notes
    # Handed back: the agent owns its files again; the verifier's directory is gone.
    after = await sandbox.exec("echo more >> mine.txt && ls -a")
    assert after.exit_code == 0 and b".openforge-verify" not in after.stdout, after


async def test_an_absolute_directory_and_outputs(box: tuple[int | None, Sandbox]) -> None:
    _, sandbox = box
    script = (
        b"cat /tests/expect > /logs/verifier/reward.txt; (sleep 600 >/dev/null 2>&1 &); echo done"
    )
    run = await sandbox.exec_verifier(
        VerifierExec(
            ["sh", "/tests/test.sh"],
            {"test.sh": script, "expect": b"0.5\n"},
            dir="/tests",
            outputs="/logs/verifier",
            own_uid=False,
            timeout=60,
        )
    )
    assert run.result.stdout == b"done\n" and run.outputs == {"reward.txt": b"0.5\n"}, run
    assert run.channel == b""  # never opened: the caller reads its outputs instead
    alive = "grep -l '^Name:.sleep' /proc/[0-9]*/status | xargs -r grep -h '^State' | grep -vc Z"
    left = await sandbox.exec(alive + " || true")
    assert left.stdout.strip() == b"0", left


async def test_a_shell_verifier_and_python_c_see_nothing_of_the_agents(
    box: tuple[int | None, Sandbox],
) -> None:
    """A verifier without ``openforge_verify`` prints its reward (no channel); ``python3 -c``
    run from the agent's workdir imports no module the agent planted there."""
    _, sandbox = box
    await sandbox.exec("echo 'raise SystemExit(7)' > json.py && cp json.py os.py")
    check = "python3 -c 'import json; print(json.dumps({\"reward\": 0.5}))'"
    run = await sandbox.exec_verifier(
        VerifierExec("sh .openforge-verify/verify.sh", {"verify.sh": check.encode()}, timeout=60)
    )
    assert (run.result.exit_code, run.result.stdout, run.channel) == (0, b'{"reward": 0.5}\n', b"")


async def test_without_another_uid_the_rest_still_holds(tmp_path: Path) -> None:
    """``sandbox_uid="caller"`` (what an unprivileged caller gets): no uid to change to, and
    the verifier still gets its own directory, HOME, python3 and channel."""
    backend = create_backend("local", root=tmp_path / "boxes", sandbox_uid="caller")
    sandbox = await backend.create(SandboxSpec(network="none"))
    try:
        await sandbox.put({"mine.txt": b"hidden\n"})
        await sandbox.exec("ln -s /tmp .openforge-verify")
        run = await sandbox.exec_verifier(
            VerifierExec(
                "python3 .openforge-verify/probe.py",
                {"openforge_verify.py": LIB, "probe.py": PROBE},
                timeout=60,
            )
        )
    finally:
        await sandbox.close()
        await backend.close()
    seen = json.loads(run.channel.decode().splitlines()[-1])["details"]
    assert run.uid is None and seen["agent_file"] == "hidden\n", run
    assert seen["home"] == "/run/openforge-verifier/home" and seen["isolated"] == 1
    assert any("symlink" in n for n in run.notes), run.notes
