"""Message content through tiktoken's BPE, for tokenizers where that gives the same ids.

Tokenizing the new content of a call is most of a gateway's own work on agent traffic (a
3 KB tool result: about 1.2 ms CPU through ``tokenizers``, 0.16 ms through tiktoken's
CoreBPE given the split as below; bench/gateway.py ``--profile``). The two agree exactly
when the model's tokenizer is what tiktoken computes: a byte-level BPE with GPT-2's split regex
and nothing around it (no normalizer, no byte fallback, no dropout, no word prefixes or
suffixes), every added token special (content is encoded with special-token matching
off), and merges whose result ids rise with their rank, so that tiktoken's rule (merge the
adjacent pair whose concatenation has the lowest id) picks the merge ``tokenizers``
picks (the lowest-ranked merge). :func:`fast_encoder` checks all of that on the
``tokenizer.json`` and returns None for any other tokenizer, which then keeps the
``tokenizers`` path.

Texts holding a byte the vocabulary has no single-byte token for (a few control
characters, planes 4-11) or lone surrogates go to ``tokenizers`` too: tiktoken cannot
encode them and ``tokenizers`` drops or rejects them in its own way.

Equivalence is tested on the repository's sources, the recorded harness prompts, the
Python standard library and random Unicode (tests/rendering/test_bpe.py), and
``bench/bpe_check.py`` runs the same comparison over this Python's whole library
directory as well (39,789 texts, 199.9 M characters: no difference).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["GPT2_SPLIT", "fast_encoder"]

# The ByteLevel pre-tokenizer's split (tokenizers' byte_level.rs, GPT-2's encoder.py).
GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# The same split as tiktoken is given it: the branches without lookaround in one group.
# fancy-regex (tiktoken's regex engine) runs a pattern holding a lookahead on its
# backtracking VM and hands each lookaround-free part to the regex crate; as one group, the
# first six branches are one hand-off per piece instead of up to six (encoding 3 KB of
# source code: 160 against 293 µs). Branches are still tried in the same order, the regex
# crate's leftmost-first match is the one backtracking finds, and nothing follows the group
# to backtrack into it: the pieces are the same (tests/rendering/test_bpe.py).
_TIKTOKEN_SPLIT = "(?:" + GPT2_SPLIT.removesuffix(r"|\s+(?!\S)|\s+") + r")|\s+(?!\S)|\s+"

# UTF-8 lead bytes and the code points they begin (continuation bytes: any non-ASCII).
_LEADS = [(0xC2, 0xDF, 0x80, 0x7FF)] + [
    (b, b, (b - 0xE0) << 12, ((b - 0xE0) << 12) + 0xFFF) for b in range(0xE0, 0xF0)
]
_LEADS += [
    (b, b, (b - 0xF0) << 18, min(((b - 0xF0) << 18) + 0x3FFFF, 0x10FFFF)) for b in range(0xF0, 0xF5)
]  # 0xF4 leads U+100000-U+10FFFF only: the last code point


def _unsafe_pattern(missing: set[int]) -> re.Pattern[str] | None:
    """Characters whose UTF-8 bytes include one of ``missing`` (and lone surrogates);
    None when a missing byte could sit inside any non-ASCII character."""
    if any(0x80 <= b <= 0xBF for b in missing):
        return None
    ranges = [(b, b) for b in sorted(missing) if b < 0x80]
    for lo_byte, hi_byte, lo, hi in _LEADS:
        if any(lo_byte <= b <= hi_byte for b in missing):
            ranges.append((max(lo, 0x80), hi))
    ranges.append((0xD800, 0xDFFF))
    return re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")


def _safe_text(missing: set[int]) -> Callable[[str], bool] | None:
    """Whether a text holds none of ``missing``'s characters (see :func:`_unsafe_pattern`);
    None when that cannot be told. ASCII text (most tool output) is checked for the few
    ASCII bytes missing with ``in``, a memchr each: the pattern's scan cost ~30 µs on a
    3 KB tool result in the gateway (its BPE ~400 µs; 2 % of the samples at 64
    connections, bench/gateway.py ``--profile``)."""
    pattern = _unsafe_pattern(missing)
    if pattern is None:
        return None
    search = pattern.search
    ascii_missing = tuple(chr(b) for b in sorted(missing) if b < 0x80)

    def safe(text: str) -> bool:
        if text.isascii():
            return not any(c in text for c in ascii_missing)
        return search(text) is None

    return safe


def _byte_level_only(spec: dict[str, Any]) -> bool:
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    return (
        model.get("type") == "BPE"
        and spec.get("normalizer") is None
        and not model.get("byte_fallback")
        and model.get("dropout") in (None, 0.0)
        and not model.get("continuing_subword_prefix")
        and not model.get("end_of_word_suffix")
        and not model.get("ignore_merges")
        and pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space")
        and all(t.get("special") for t in spec.get("added_tokens") or [])
    )


def _ranks(spec: dict[str, Any], byte_of: dict[str, int]) -> dict[bytes, int] | None:
    """tiktoken's mergeable ranks (token bytes -> id), or None when merge order and id
    order disagree or a multi-byte token is no merge's result."""
    model = spec["model"]
    vocab: dict[str, int] = model["vocab"]
    special = {t["content"] for t in spec.get("added_tokens") or []}
    last = -1
    results = set()
    for merge in model["merges"]:
        a, b = merge if isinstance(merge, list) else merge.split(" ", 1)
        token = vocab.get(a + b)
        if token is None or token <= last:
            return None
        last = token
        results.add(a + b)
    try:
        ranks = {bytes(byte_of[c] for c in t): i for t, i in vocab.items() if t not in special}
    except KeyError:  # a piece outside the byte-level alphabet
        return None
    singles = {t for t in vocab if t not in special and len(t) == 1}
    if len(ranks) != len(vocab) - len(special) or set(vocab) - special - singles != results:
        return None
    return ranks


def fast_encoder(
    spec: dict[str, Any], byte_of: dict[str, int]
) -> tuple[Callable[[str], list[int]], Callable[[str], bool]] | None:
    """(encode, safe) for a ``tokenizer.json`` tiktoken reproduces exactly, else None.

    ``encode(text)`` gives the ids ``tokenizers`` gives with special-token matching off,
    for any text ``safe`` accepts. ``byte_of`` maps the ByteLevel alphabet's characters
    to bytes.
    """
    if not _byte_level_only(spec):
        return None
    ranks = _ranks(spec, byte_of)
    if ranks is None:
        return None
    safe = _safe_text(set(range(256)) - {t[0] for t in ranks if len(t) == 1})
    if safe is None:
        return None
    import tiktoken

    enc = tiktoken.Encoding(
        "openforge-content", pat_str=_TIKTOKEN_SPLIT, mergeable_ranks=ranks, special_tokens={}
    )
    return enc.encode_ordinary, safe
