"""The command line speaks one language: every command and option of ``openforge``, walked
through click, has help in plain words, and the same thing has the same name everywhere."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from openforge.cli import app
from openforge.harnesses.registry import get_harness, harness_names, required_options

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> Iterator[tuple[str, click.Command]]:
    """(``openforge sub cmd``, command) for every command, groups included."""
    todo: list[tuple[str, click.Command]] = [("openforge", typer.main.get_command(app))]
    while todo:
        path, cmd = todo.pop()
        yield path, cmd
        subs: dict[str, click.Command] = getattr(cmd, "commands", {})  # typer's groups
        todo += [(f"{path} {name}", sub) for name, sub in subs.items()]


COMMANDS = dict(_commands())


def _help(cmd: click.Command) -> str:
    return " ".join([cmd.help or "", *(getattr(p, "help", "") or "" for p in cmd.params)])


def test_every_option_and_command_has_help() -> None:
    missing = [
        f"{path} {'/'.join(p.opts)}"
        for path, cmd in COMMANDS.items()
        for p in cmd.params
        if not getattr(p, "help", None)
    ]
    assert not missing, missing
    assert not [path for path, cmd in COMMANDS.items() if not cmd.help]


def test_help_has_no_rest_markup_or_internal_names() -> None:
    # reST literals and Sphinx roles are for docstrings read in the source, not for users.
    bad = re.compile(r"``|:(func|class|data|meth|mod):|\bRunArgs\b|eval_\b")
    found = [path for path, cmd in COMMANDS.items() if bad.search(_help(cmd))]
    assert not found, found


def test_one_spelling_per_thing() -> None:
    """Harness options are -O/--harness-option wherever a command takes them; --engine is
    only ever the model engine; the gateway port has one default."""
    visible = {
        path: {o: p for p in cmd.params if not getattr(p, "hidden", False) for o in p.opts}
        for path, cmd in COMMANDS.items()
    }
    takers = [path for path, opts in visible.items() if "--harness-option" in opts]
    assert {"openforge rollout", "openforge eval", "openforge harness check"} <= set(takers)
    for path, opts in visible.items():
        assert "--option" not in opts and "-o" not in opts, path
        if "--harness-option" in opts:
            assert opts["--harness-option"].opts == ["--harness-option", "-O"], path
        if "--container-engine" in opts:
            assert "--engine" not in opts, path
        if "--backend" in opts:
            assert opts["--backend"].default == "local", path
    gateway_port = visible["openforge gateway"]["--port"].default
    assert visible["openforge k8s manifests"]["--port"].default == gateway_port


@pytest.mark.parametrize("path", ["openforge rollout", "openforge gateway", "openforge train"])
def test_help_is_not_cut_at_80_columns(path: str) -> None:
    """Every option's help is shown whole in an 80-column terminal, only wrapped (URLs,
    $VARIABLES and paths are long words that a table would cut short with an ellipsis)."""
    got = CliRunner().invoke(app, [*path.split()[1:], "--help"], terminal_width=80)
    assert got.exit_code == 0, got.output
    shown = "".join(got.output.split())
    helps = [getattr(p, "help", "") or "" for p in COMMANDS[path].params]
    cut = [h for h in helps if "".join(h.split()) not in shown]
    assert not cut, cut


def test_harness_list_names_every_adapter_without_a_traceback() -> None:
    got = CliRunner().invoke(app, ["harness", "list"])
    assert got.exit_code == 0, got.output
    assert "Traceback" not in got.output and "TypeError" not in got.output
    rows = {line.split("\t")[0]: line.split("\t") for line in got.output.splitlines()}
    assert set(rows) == set(harness_names())
    assert rows["shell"][-1] == "needs -O command=…"
    assert rows["claw"][1] == get_harness("claw").version


def test_deprecated_spellings_still_work_and_warn(tmp_path: Path) -> None:
    # A harness missing its required option is refused in words, before anything runs,
    # whichever spelling carried the options.
    got = CliRunner().invoke(app, ["harness", "check", "shell", "-o", "nope=1"])
    assert got.exit_code == 2
    assert "--option/-o is deprecated; use --harness-option/-O" in got.output
    assert "harness 'shell' has no option nope" in got.output
    got = CliRunner().invoke(app, ["harness", "check", "shell", "-O", "bad"])
    assert got.exit_code == 2 and "expected KEY=VALUE, got 'bad'" in got.output
    got = CliRunner().invoke(app, ["images", "build", "--tasks", str(tmp_path), "--engine", "nx"])
    assert "--engine is deprecated; use --container-engine" in got.output
    assert got.exit_code == 2 and "nx is not installed" in got.output


def test_docs_list_every_harness_at_its_version() -> None:
    """docs/harnesses.md's table says what `openforge harness list` says."""
    table = (ROOT / "docs" / "harnesses.md").read_text()
    rows = {
        m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z-]+)` \| ([^ |]+)", table, re.M)
    }
    for name in harness_names():
        harness = get_harness(name, command="true") if required_options(name) else get_harness(name)
        assert rows.get(name) == harness.version, name


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_help_of_every_command_exits_0(path: str) -> None:
    got = CliRunner().invoke(app, [*path.split()[1:], "--help"])
    assert got.exit_code == 0, got.output
    assert "Traceback" not in got.output
