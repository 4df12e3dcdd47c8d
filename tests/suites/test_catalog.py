"""The suite catalog: every suite can be found, names are unique, and its order decides
which suite a directory or checkout belongs to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openforge.suites import builtin_suite, load_task_dir, load_tasks
from openforge.suites.catalog import BY_NAME, SUITE_SPLITS, SUITES


def test_every_suite_has_a_unique_name_and_a_way_to_be_found() -> None:
    assert len(BY_NAME) == len(SUITES)
    for suite in SUITES:
        ways = (suite.checkout, suite.task_dirs, suite.task_files, suite.bundled)
        assert any(w is not None for w in ways), suite.name
        assert suite.formats, suite.name


def test_suite_splits_are_the_suites_own() -> None:
    assert BY_NAME["claweval"].splits == SUITE_SPLITS
    assert not {"train", "test"} & set(SUITE_SPLITS)


def test_only_declared_bundled_suites_resolve() -> None:
    claw_mini = builtin_suite("claw-mini")
    assert claw_mini is not None and (claw_mini / "hello-file" / "task.toml").is_file()
    # A directory of the package that is no suite (its bytecode cache, say) is not one.
    assert builtin_suite("__pycache__") is None
    assert builtin_suite("webvoyager") is None  # a suite, but not shipped with OpenForge


def _native(d: Path, task_id: str) -> None:
    d.mkdir(parents=True)
    (d / "task.toml").write_text(f'id = "{task_id}"\ninstruction = "Do it."\n')
    (d / "verify").mkdir()
    (d / "verify" / "verify.sh").write_text("echo '{\"reward\": 1}'\n")


def test_first_claim_wins_and_an_unclaimed_dir_reads_as_terminal_bench(tmp_path: Path) -> None:
    # task.toml and task.yaml together: native comes before Terminal-Bench in the catalog.
    both = tmp_path / "both"
    _native(both, "both")
    (both / "task.yaml").write_text("instruction: not this one\n")
    task = load_task_dir(both)
    assert (task.id, task.format) == ("both", "native")
    # A directory no suite claims is read as Terminal-Bench, whose error names its task.yaml.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OSError, match=r"task\.yaml"):
        load_task_dir(empty)


def test_a_kind_that_is_no_checkout_suite_is_a_path(tmp_path: Path) -> None:
    # claw-mini is a suite, but not one read from a checkout: "claw-mini:X" is a file name.
    loaded = load_tasks(f"claw-mini:{tmp_path}")
    (error,) = loaded.errors
    assert (error.field, error.problem) == ("(path)", "does not exist")


def _osworld(root: Path) -> Path:
    (root / "examples" / "os").mkdir(parents=True)
    example = {"id": "e1", "instruction": "Close the window.", "config": []}
    example["evaluator"] = {"func": "infeasible"}
    (root / "examples" / "os" / "e1.json").write_text(json.dumps(example))
    (root / "test_all.json").write_text(json.dumps({"os": ["e1"]}))
    return root


def test_osworld_loads_named_or_recognised(tmp_path: Path) -> None:
    root = _osworld(tmp_path / "evaluation_examples")
    named, recognised = load_tasks(f"osworld:{root}"), load_tasks(root)
    assert [t.id for t in named.tasks] == [t.id for t in recognised.tasks] == ["osworld/os/e1"]
    assert not named.errors and not recognised.errors
    # Named, a directory that is no checkout is the suite's own error, not a walk.
    missing = load_tasks(f"osworld:{tmp_path / 'nowhere'}")
    assert not missing.tasks and [e.field for e in missing.errors] == ["(json)"]
