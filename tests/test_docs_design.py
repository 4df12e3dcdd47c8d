"""docs/design.md says what the code does: its commands parse with the real command line,
its `harness:` example is a config `openforge train` loads, its context table is the stored
fingerprints' figures, and the README points to it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import orjson
import typer

from openforge.cli import app
from openforge.harnesses.fingerprint import FINGERPRINT_DIR
from openforge.harnesses.registry import get_harness
from openforge.training.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SMOLLM2_CONTEXT = 8192  # max_position_embeddings of SmolLM2-135M-Instruct's config.json


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DESIGN.read_text(), re.S)


def test_readme_points_to_the_design_page_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/design.md)" in readme and "DESIGN document" not in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", DESIGN.read_text()):
        assert (DESIGN.parent / target).exists(), target


def test_its_commands_parse_with_the_real_command_line() -> None:
    root = typer.main.get_command(app)
    commands = []
    for block in _blocks("bash"):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.strip().removeprefix("#").strip()
            if line.startswith("openforge "):
                commands.append(shlex.split(line, comments=True)[1:])
    assert len(commands) >= 3
    for argv in commands:
        cmd = root
        while argv and hasattr(cmd, "commands"):  # typer's groups
            cmd = cmd.commands[argv.pop(0)]
        with cmd.make_context(cmd.name or "", argv) as ctx:  # unknown options raise
            assert ctx.params


def test_its_harness_example_is_a_config_train_loads(tmp_path: Path) -> None:
    (example,) = _blocks("yaml")
    path = tmp_path / "train.yaml"
    path.write_text(example)
    cfg = load_config(path)
    options = cfg.rollout_options["harness_options"]
    harness = get_harness(cfg.harness, **options)
    assert harness.name == "mini-swe-agent" and cfg.model == "smollm2-135m"


def test_its_context_table_is_the_fingerprints() -> None:
    rows = re.findall(
        r"^\| ([a-z-]+) ([0-9.]+) \| ([0-9,]+) tokens \| (yes|no) \|$", DESIGN.read_text(), re.M
    )
    assert len(rows) == len(list(FINGERPRINT_DIR.glob("*.json")))
    for name, version, tokens, fits in rows:
        stored = orjson.loads((FINGERPRINT_DIR / f"{name}-{version}.json").read_bytes())
        assert stored["first_prompt_tokens"] == int(tokens.replace(",", "")), name
        assert (fits == "yes") == (stored["first_prompt_tokens"] < SMOLLM2_CONTEXT), name
