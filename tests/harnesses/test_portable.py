"""Portable harness installs: assembled from the host's install, runnable in an image that has
none of its libraries, and turned into the image Kubernetes pods mount."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnesses.conftest import require
from openforge.cli import app
from openforge.harnesses.base import HarnessError
from openforge.harnesses.portable import Portable, Recipe, build_portable, portable_dir
from openforge.harnesses.registry import get_harness
from openforge.sandboxes.base import HARNESS_DIR
from openforge.sandboxes.container import _ulimits


def test_a_missing_source_names_the_install_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path))
    recipe = Recipe("ghost", "1.0", static={"bin/ghost": str(tmp_path / "nowhere")})
    with pytest.raises(HarnessError, match=r"install-harnesses\.sh"):
        build_portable(recipe)


def test_the_install_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same sources give the same directory; a changed source gives a new one."""
    monkeypatch.setenv("OPENFORGE_HOME", str(tmp_path / "home"))
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho one\n")
    recipe = Recipe("t", "1", static={"libexec/tool": str(tool)},
                    scripts={"bin/t": f"#!/bin/sh\nexec {HARNESS_DIR}/libexec/tool\n"})  # fmt: skip
    first = build_portable(recipe)
    assert first == portable_dir(recipe) and build_portable(recipe) == first
    assert (first / "lib/ld-linux-x86-64.so.2").is_file()  # the loader always comes along
    assert (first / "bin/t").stat().st_mode & 0o111
    tool.write_text("#!/bin/sh\necho two, longer\n")
    assert build_portable(recipe) != first


@pytest.mark.slow
def test_the_harness_image_mounts_into_an_image_without_its_libraries(
    podman_images: dict[str, str],
) -> None:
    """``openforge harness image`` builds the image pods mount at /opt/openforge/harness;
    mounted that way (podman's image mount) into the bare Debian base, Claude Code runs."""
    require("claude-code")
    got = CliRunner().invoke(app, ["harness", "image", "claude-code"])
    assert got.exit_code == 0, got.output
    ref = got.output.strip().splitlines()[-1]
    assert ref.startswith("localhost/openforge-harness:claude-code-2.1.197-")
    harness = get_harness("claude-code")
    assert isinstance(harness, Portable)
    assert ref.endswith(portable_dir(harness.portable()).name)
    run = subprocess.run(
        ["podman", "run", "--rm", *_ulimits(), "--network", "none",
         "--mount", f"type=image,source={ref},destination={HARNESS_DIR}",
         podman_images["base"], f"{HARNESS_DIR}/bin/claude", "--version"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout.startswith("2.1.197"), run.stderr
