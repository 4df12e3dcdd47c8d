"""The guest convention checked on the bundles: every program listed, bundled the same way
each time, and runnable from its bundle in isolated mode with the bundle's own common.py."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from openforge.guest import LIBRARIES, PROGRAMS, bundle, command, source

SRC = Path(__file__).resolve().parents[2] / "src" / "openforge"
# The programs whose whole command line is argparse's, so --help answers without side effects.
ARGPARSE = ("claw_agent", "browser_agent", "computer_agent", "webapps_server", "osworld_eval")


def test_every_program_and_library_is_a_file_under_src() -> None:
    for name in (*PROGRAMS, *LIBRARIES):
        assert source(name).is_file(), name
        assert source(name).resolve().is_relative_to(SRC)
    with pytest.raises(KeyError, match="no guest program"):
        source("nope")


def test_bundle_bytes_depend_on_the_sources_only() -> None:
    for name in PROGRAMS:
        first = bundle(name)
        assert bundle.__wrapped__(name) == first, name
        with zipfile.ZipFile(BytesIO(first)) as zf:
            infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
        assert "openforge/guest/common.py" in names
        assert f"openforge/{PROGRAMS[name]}" in names


def test_bundle_carries_a_replaced_source() -> None:
    edited = source("claw_agent").read_bytes() + b"\n# edited\n"
    with zipfile.ZipFile(BytesIO(bundle("claw_agent", replace=edited))) as zf:
        assert zf.read(f"openforge/{PROGRAMS['claw_agent']}") == edited


@pytest.mark.parametrize("name", ARGPARSE)
def test_a_bundle_runs_isolated(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.pyz"
    path.write_bytes(bundle(name))
    done = subprocess.run(
        command(sys.executable, str(path), "--help"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_common_comes_from_the_bundle_not_the_host(tmp_path: Path) -> None:
    # The host has openforge installed; under -I the zipapp is sys.path[0], so what a guest
    # imports is what was shipped with it, as in a sandbox without OpenForge.
    probe = (
        b"import sys\nfrom openforge.guest import common\n"
        b"def main(argv):\n    print(common.__file__)\n    return 0\n"
    )
    path = tmp_path / "probe.pyz"
    path.write_bytes(bundle("claw_agent", replace=probe))
    done = subprocess.run(
        command(sys.executable, str(path)), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}/openforge/guest/common.py"


def test_a_suite_program_runs_from_its_bundle(tmp_path: Path) -> None:
    # OSWorld's evaluator under suites/: its stubs and common ship with it; with no desktop
    # result (nothing ran), an infeasible task that the agent did not call FAIL scores 0.
    (tmp_path / "task.json").write_text(json.dumps({"evaluator": {"func": "infeasible"}}))
    path = tmp_path / "osworld_eval.pyz"
    path.write_bytes(bundle("osworld_eval"))
    done = subprocess.run(
        command(sys.executable, str(path), "--task", str(tmp_path / "task.json")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"reward": 0.0, "details": {"status": None}}
