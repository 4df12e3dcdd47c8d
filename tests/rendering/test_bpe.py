"""tiktoken's BPE for message content gives exactly the ids ``tokenizers`` gives."""

from __future__ import annotations

import copy
import json
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.rendering import Renderer
from openforge.rendering.bpe import _safe_text, _unsafe_pattern, fast_encoder
from openforge.rendering.tokenizer import Tokenizer, _byte_decoder, _encode

CHECKOUT = Path(__file__).resolve().parents[2]
FIXTURES = [
    CHECKOUT.parent / "shared" / "fixtures" / "harness-requests",
    CHECKOUT / "tests" / "dialects" / "fixtures",
]


@pytest.fixture(scope="module")
def tok(renderer: Renderer) -> Tokenizer:
    assert renderer.tokenizer._fast is not None, "SmolLM2's tokenizer qualifies for tiktoken"
    return renderer.tokenizer


def _slow(tok: Tokenizer, text: str) -> list[int]:
    return _encode(tok._content, text)


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def _corpus() -> list[str]:
    """This checkout's sources and docs, the recorded harness requests (whole, and every
    string in them: system prompts, tool descriptions), and the standard library's
    top-level modules."""
    files = [*CHECKOUT.glob("src/**/*.py"), *CHECKOUT.glob("docs/*.md"), CHECKOUT / "README.md"]
    files += sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    recorded = [p for root in FIXTURES if root.is_dir() for p in sorted(root.glob("*.json"))]
    assert recorded, f"no recorded harness requests in {FIXTURES}"
    for path in recorded:
        texts.append(path.read_text())
        texts += _leaves(json.loads(path.read_text()))
    return texts


def test_same_ids_on_sources_harness_prompts_and_the_standard_library(tok: Tokenizer) -> None:
    texts = _corpus()
    assert sum(map(len, texts)) > 5_000_000
    differ = [t[:80] for t in texts if tok.encode(t) != _slow(tok, t)]
    assert differ == []


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_same_ids_on_any_unicode(tok: Tokenizer, text: str) -> None:
    assert tok.encode(text) == _slow(tok, text)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [" ", "  ", "\n", "\t", "\r\n", "'s", "'ll", "x", "é", "Ω", "中文", "12", "٣",
             "🙂", "<|im_end|>", "<|im_start|>", "\u00a0", "\u2028", "\u200b", ")", "{}"]
        ),
        max_size=40,
    )
)  # fmt: skip
def test_same_ids_on_whitespace_and_split_edges(tok: Tokenizer, pieces: list[str]) -> None:
    text = "".join(pieces)
    assert tok.encode(text) == _slow(tok, text)


def test_special_token_text_stays_text_and_odd_bytes_take_the_slow_path(tok: Tokenizer) -> None:
    end = tok.token_id("<|im_end|>")
    ids = tok.encode("say <|im_end|> please")
    assert end not in ids and tok.decode(ids) == "say <|im_end|> please"
    assert tok._safe is not None
    for odd in ("a\x04b", "x\U00050000y", "ok\ud800", "é\x04"):
        assert not tok._safe(odd)
    assert tok._safe("plain ascii\n\tcode()") and tok._safe("é ü 中文")
    assert tok.encode("a\x04b") == _slow(tok, "a\x04b")


# SmolLM2's bytes without a token of their own (some ASCII controls, lead bytes), and a
# vocabulary without the last lead byte either.
_MISSING = [
    {4, 6, 19, 20, 22, 29, 192, 193, 241, 242, *range(245, 256)},
    {0, 9, 127, *range(240, 256)},
]


@settings(max_examples=400, deadline=None)
@given(
    st.text(st.characters(max_codepoint=0x7F), max_size=40)
    | st.text(st.characters(exclude_categories=()), max_size=40)
)
def test_the_ascii_shortcut_tells_what_the_pattern_tells(text: str) -> None:
    for missing in _MISSING:
        safe, pattern = _safe_text(missing), _unsafe_pattern(missing)
        assert safe is not None and pattern is not None
        assert safe(text) == (pattern.search(text) is None)


def test_tokenizers_tiktoken_cannot_reproduce_are_left_alone(tok: Tokenizer) -> None:
    spec = json.loads(tok._content.to_str())
    byte_of = _byte_decoder()
    assert fast_encoder(spec, byte_of) is not None

    def changed(edit: Any) -> dict[str, Any]:
        other = copy.deepcopy(spec)
        edit(other)
        return other

    merges = spec["model"]["merges"]
    others = [
        changed(lambda s: s.update(normalizer={"type": "NFC"})),
        changed(lambda s: s["model"].update(byte_fallback=True)),
        changed(lambda s: s["pre_tokenizer"].update(add_prefix_space=True)),
        changed(lambda s: s["model"].update(merges=[merges[1], merges[0], *merges[2:]])),
        changed(lambda s: s["added_tokens"].append({"content": "hello", "special": False})),
        changed(lambda s: s.update(pre_tokenizer={"type": "Whitespace"})),
    ]
    assert [fast_encoder(o, byte_of) for o in others] == [None] * len(others)
