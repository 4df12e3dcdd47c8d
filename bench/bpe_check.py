"""tiktoken's content encoder against ``tokenizers`` on a large corpus (rendering/bpe.py).

Every ``*.py``, ``*.md``, ``*.txt``, ``*.json`` under this Python's library directory
(standard library and installed packages), this checkout's sources and docs, the
recorded harness requests and every string in them, and 20,000 random Unicode strings
from 15 scripts and planes. Prints how many texts and characters were compared, how
many took the slow path by design (bytes outside the vocabulary), and every difference.

    .venv/bin/python bench/bpe_check.py [--limit-mb N]
"""

from __future__ import annotations

import argparse
import json
import random
import sysconfig
import time
from pathlib import Path
from typing import Any

from openforge.models.registry import DEFAULT_MODEL, models_dir
from openforge.rendering import load_tokenizer
from openforge.rendering.tokenizer import _encode

CHECKOUT = Path(__file__).resolve().parents[1]
SCRIPTS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
           (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
           (0x1F300, 0x1FAFF), (0x2000, 0x206F), (0x0, 0x20), (0xE000, 0xF8FF),
           (0x10000, 0x1FFFF), (0x20000, 0x2FFFF)]  # fmt: skip


def _leaves(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    return []


def corpus(limit: int) -> list[str]:
    """The texts described above, up to ``limit`` characters of files."""
    roots = [Path(sysconfig.get_paths()["stdlib"]), CHECKOUT / "src", CHECKOUT / "docs"]
    texts: list[str] = []
    size = 0
    for root in roots:
        for ext in ("py", "md", "txt", "json"):
            for path in sorted(root.rglob(f"*.{ext}")):
                if size >= limit:
                    break
                try:
                    texts.append(path.read_text(encoding="utf-8"))
                except (UnicodeDecodeError, OSError):
                    continue
                size += len(texts[-1])
    for root in (CHECKOUT.parent / "shared" / "fixtures" / "harness-requests",):
        for path in sorted(root.glob("*.json")):
            texts += [path.read_text(), *_leaves(json.loads(path.read_text()))]
    rng = random.Random(0)
    for _ in range(20_000):
        chars = (chr(rng.randint(*rng.choice(SCRIPTS))) for _ in range(rng.randint(1, 60)))
        texts.append("".join(c for c in chars if not 0xD800 <= ord(c) <= 0xDFFF))
    return texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limit-mb", type=float, default=1000.0, help="stop reading files past this")
    a = ap.parse_args()
    tok = load_tokenizer(models_dir() / DEFAULT_MODEL)
    assert tok._fast is not None and tok._safe is not None, "tiktoken path not in use"
    texts = corpus(int(a.limit_mb * 1e6))
    start = time.monotonic()
    slow_path = differ = 0
    for text in texts:
        slow_path += not tok._safe(text)
        if tok.encode(text) != _encode(tok._content, text):
            differ += 1
            print(f"DIFFERS: {text[:120]!r}")
    chars = sum(map(len, texts))
    print(f"{len(texts)} texts, {chars / 1e6:.1f} M characters, {slow_path} on the slow path by")
    print(f"design, {differ} differences ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
