"""The guest convention checked on the source: every program listed, bundled the same way
each time, importing only what it may, and runnable from its bundle in isolated mode."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from openforge.guest import LIBRARIES, PLAIN, PROGRAMS, THIRD_PARTY, bundle, command, source

SRC = Path(__file__).resolve().parents[2] / "src" / "openforge"
# The programs whose whole command line is argparse's, so --help answers without side effects.
ARGPARSE = ("claw_agent", "browser_agent", "computer_agent", "webapps_server")


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


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_programs_import_the_stdlib_common_and_their_own_packages_only() -> None:
    for name in (*PROGRAMS, *LIBRARIES):
        allowed = THIRD_PARTY.get(name, frozenset())
        for module in _imports(source(name)):
            top = module.split(".")[0]
            if module == "openforge.guest.common" and name not in PLAIN:
                continue
            assert top in sys.stdlib_module_names or top in allowed, (name, module)


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
