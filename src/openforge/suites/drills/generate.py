"""claw-drill: held-out *instances* of one-command shell file skills, generated from seeds.

claw-mini holds out whole skills (its test tasks need commands no train task uses), which a
small model cannot learn to generalise to in a short run. claw-drill holds out instances
instead, the usual generalisation test for procedurally generated RL environments: each
family (``write-word``, ``count-lines``, ``sort-unique``, …) is one skill, and its train and
test instances draw file names, directory names and words from two disjoint fixed pools, so
no test instance's names appear anywhere in a train instance. Phrasings, numbers and
contents vary per instance.

Each instance is a native task directory (``drill-<family>-<split>-<n>``) whose verifier has
its expected values computed here and written into it as literals, so nothing the agent
does to its inputs can change what counts as right. ``load_tasks("claw-drill")`` generates
the default suite once into :func:`drill_suite`'s cache directory.

Difficulty (``levels``, the curriculum's knob, ``training/curriculum.py``): level 0 is the
instance as above; at level ``L`` >= 1 the same skill works inside a directory ``L`` names
deep (``cedar/mango``: the command must go there or name its paths), and from level 2 each
input file has a decoy of the same name and other content at the workspace root, so a
policy that ignores the directory reads the wrong data. Level ``L`` instances carry the tag
``level-L`` and the id ``drill-<family>-L<L>-<split>-<n>``; each level draws from its own
random stream, and the test split from ``test_seed``'s, so no level or split shifts another.
``load_tasks("claw-drill-levels")`` is the default suite at levels 0, 1 and 2.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from openforge.suites.cache import cached_suite

__all__ = [
    "DRILL_FAMILIES",
    "DRILL_LEVELS_SUITE",
    "DRILL_SUITE",
    "DRILL_VERSION",
    "TEST_WORDS",
    "TRAIN_WORDS",
    "drill_levels_suite",
    "drill_suite",
    "generate_drills",
    "task_level",
]

DRILL_SUITE = "claw-drill"
DRILL_LEVELS_SUITE = "claw-drill-levels"
DRILL_LEVELS = (0, 1, 2)  # claw-drill-levels' difficulties
# Bump whenever generation changes what it writes, so cached suites are not reused stale
# (tests/tasks/test_drills.py pins the default suite's digest to catch a forgotten bump).
DRILL_VERSION = 1

# Ordinary nouns; none is a substring of another (so sed/grep on one never touch another)
# and none appears in a phrasing. The first half names train instances, the second test.
_WORDS = (
    "apple", "river", "maple", "stone", "cloud", "falcon", "ember", "quartz", "lemon", "tiger",
    "garden", "pencil", "rocket", "castle", "candle", "forest", "island", "meadow", "planet",
    "silver", "winter", "violin", "harbor", "copper", "button", "dragon", "jungle", "pepper",
    "tunnel", "basket", "orange", "canyon", "willow", "marble", "thunder", "parrot", "cedar",
    "glacier", "mango", "zebra", "lantern", "crayon", "comet", "fortress", "lagoon", "prairie",
    "galaxy", "autumn", "cello", "bridge", "bronze", "ribbon", "lizard", "ginger", "cavern",
    "hamper", "walnut", "valley", "summit", "anchor",
)  # fmt: skip
TRAIN_WORDS: tuple[str, ...] = _WORDS[:30]
TEST_WORDS: tuple[str, ...] = _WORDS[30:]
_EXTS = ("txt", "log", "md")

_TOML = """id = {id}
instruction = {instruction}
timeout = 120
split = "{split}"
tags = ["drill", "{family}"{level_tag}]
network = "gateway"

[resources]
cpu = 1
memory_mb = 512
pids = 128

[verify]
timeout = 60
"""
_VERIFY_HEAD = (
    "import os  # noqa: F401\n\nfrom openforge_verify import done, read  # noqa: F401\n\n"
)


@dataclass(frozen=True, slots=True)
class Drill:
    """One generated instance: what to ask, what the workspace holds, the answer, the check."""

    instruction: str
    command: str  # the one-line reference solution
    checks: str  # verifier body (Python, ends in done(...)); expected values as literals
    files: dict[str, str] = field(default_factory=dict)  # workspace path -> text


Family = Callable[[random.Random, Sequence[str]], Drill]


def _file(rng: random.Random, word: str) -> str:
    return f"{word}.{rng.choice(_EXTS)}"


def _text(lines: Sequence[str]) -> str:
    return "".join(f"{ln}\n" for ln in lines)


def _lines(rng: random.Random, words: Sequence[str], n: int, most: int = 5) -> list[str]:
    """``n`` lines of 1..``most`` words drawn from ``words``."""
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, most))) for _ in range(n)]


def _say(rng: random.Random, phrasings: Sequence[str], **names: str) -> str:
    return rng.choice(phrasings).format(**names)


def _write_word(rng: random.Random, words: Sequence[str]) -> Drill:
    name, w = rng.sample(words, 2)
    f = _file(rng, name)
    return Drill(
        _say(
            rng,
            (
                "Create a file named {f} containing the word {w}.",
                "Write the word {w} to a new file called {f}.",
                "Make a file {f} whose only content is the word {w}.",
            ),
            f=f,
            w=w,
        ),
        f"printf '{w}\\n' > {f}",
        f"c = read({f!r})\ndone(c is not None and c.strip() == {w!r}, want={w!r}, found=c)\n",
    )


def _make_dir(rng: random.Random, words: Sequence[str]) -> Drill:
    d = rng.choice(words)
    return Drill(
        _say(
            rng,
            (
                "Create a directory named {d}.",
                "Make a new directory called {d}.",
                "Create an empty folder named {d}.",
            ),
            d=d,
        ),
        f"mkdir {d}",
        f"done(os.path.isdir({d!r}), want={d!r}, found=sorted(os.listdir('.')))\n",
    )


def _nested_dirs(rng: random.Random, words: Sequence[str]) -> Drill:
    p = "/".join(rng.sample(words, 3))
    return Drill(
        _say(
            rng,
            (
                "Create the nested directories {p}.",
                "Make the directory {p}, creating any missing parent directories.",
            ),
            p=p,
        ),
        f"mkdir -p {p}",
        f"done(os.path.isdir({p!r}), want={p!r})\n",
    )


def _move_or_copy(
    rng: random.Random, words: Sequence[str], phrasings: Sequence[str], keep: bool
) -> Drill:
    """A file copied (``keep``: the source stays, ``cp``) or renamed (``mv``)."""
    a, b = rng.sample(words, 2)
    src, dst = _file(rng, a), _file(rng, b)
    body = _text(_lines(rng, words, rng.randint(2, 5)))
    ok = (
        f"c == {body!r} and read({src!r}) == {body!r}"
        if keep
        else f"not os.path.lexists({src!r}) and c == {body!r}"
    )
    return Drill(
        _say(rng, phrasings, src=src, dst=dst),
        f"{'cp' if keep else 'mv'} {src} {dst}",
        f"c = read({dst!r})\ndone({ok}, found=c)\n",
        {src: body},
    )


def _copy_file(rng: random.Random, words: Sequence[str]) -> Drill:
    return _move_or_copy(
        rng,
        words,
        (
            "Copy {src} to {dst} (keep {src}).",
            "Make a copy of {src} named {dst}, leaving {src} in place.",
            "Duplicate {src} as {dst}.",
        ),
        keep=True,
    )


def _rename_file(rng: random.Random, words: Sequence[str]) -> Drill:
    return _move_or_copy(
        rng,
        words,
        ("Rename {src} to {dst}.", "Move {src} to {dst}.", "Change the name of {src} to {dst}."),
        keep=False,
    )


def _delete_file(rng: random.Random, words: Sequence[str]) -> Drill:
    a, b = rng.sample(words, 2)
    f, keep = _file(rng, a), _file(rng, b)
    junk, kept = (_text(_lines(rng, words, rng.randint(1, 4))) for _ in range(2))
    return Drill(
        _say(
            rng,
            (
                "Delete the file {f}.",
                "Remove {f} but keep {k} unchanged.",
                "Delete {f} from the working directory, leaving {k} alone.",
            ),
            f=f,
            k=keep,
        ),
        f"rm {f}",
        f"done(not os.path.lexists({f!r}) and read({keep!r}) == {kept!r},"
        f" found=sorted(os.listdir('.')))\n",
        {f: junk, keep: kept},
    )


def _empty_file(rng: random.Random, words: Sequence[str]) -> Drill:
    f = _file(rng, rng.choice(words))
    return Drill(
        _say(rng, ("Create an empty file named {f}.", "Make a new empty file called {f}."), f=f),
        f"touch {f}",
        f"done(os.path.isfile({f!r}) and os.path.getsize({f!r}) == 0, want={f!r})\n",
    )


def _append_line(rng: random.Random, words: Sequence[str]) -> Drill:
    name, w = rng.sample(words, 2)
    f = _file(rng, name)
    old = _lines(rng, words, rng.randint(2, 6))
    return Drill(
        _say(
            rng,
            (
                "Append a final line containing the word {w} to {f}, keeping the existing lines.",
                "Add the word {w} as a new last line of {f} without changing the lines "
                "already there.",
                "Add a line with {w} to the end of {f}.",
            ),
            f=f,
            w=w,
        ),
        f"echo {w} >> {f}",
        f"c = read({f!r})\n"
        f"done(c is not None and c.rstrip('\\n').split('\\n') == {[*old, w]!r}, found=c)\n",
        {f: _text(old)},
    )


def _count(rng: random.Random, words: Sequence[str], what: str) -> Drill:
    a, b = rng.sample(words, 2)
    f, out = _file(rng, a), _file(rng, b)
    lines = _lines(rng, words, rng.randint(5, 25))
    want = str(len(lines) if what == "lines" else sum(len(ln.split()) for ln in lines))
    flag = "-l" if what == "lines" else "-w"
    return Drill(
        _say(
            rng,
            (
                f"Count the {what} in {{f}} and write the number to {{o}}.",
                f"Write the number of {what} in {{f}} to {{o}}.",
                f"How many {what} does {{f}} have? Write the number to {{o}}.",
            ),
            f=f,
            o=out,
        ),
        f"wc {flag} < {f} > {out}",
        f"c = read({out!r})\n"
        f"done(c is not None and c.strip() == {want!r}, want={want!r}, found=c)\n",
        {f: _text(lines)},
    )


def _count_lines(rng: random.Random, words: Sequence[str]) -> Drill:
    return _count(rng, words, "lines")


def _count_words(rng: random.Random, words: Sequence[str]) -> Drill:
    return _count(rng, words, "words")


def _transform(
    rng: random.Random,
    words: Sequence[str],
    phrasings: Sequence[str],
    command: str,
    lines: list[str],
    want: list[str],
) -> Drill:
    """A family that writes some function of ``lines`` (the input) to a new file."""
    a, b = rng.sample(words, 2)
    f, out = _file(rng, a), _file(rng, b)
    return Drill(
        _say(rng, phrasings, f=f, o=out),
        command.format(f=f, o=out),
        f"c = read({out!r})\n"
        f"done(c is not None and c.rstrip('\\n').split('\\n') == {want!r}, want={want!r},"
        f" found=c)\n",
        {f: _text(lines)},
    )


def _uppercase(rng: random.Random, words: Sequence[str]) -> Drill:
    lines = _lines(rng, words, rng.randint(2, 6))
    return _transform(
        rng,
        words,
        (
            "Write the contents of {f} in upper case to {o}.",
            "Convert {f} to upper case and save the result as {o}.",
        ),
        "tr a-z A-Z < {f} > {o}",
        lines,
        [ln.upper() for ln in lines],
    )


def _sort_unique(rng: random.Random, words: Sequence[str]) -> Drill:
    vocab = rng.sample(words, rng.randint(3, 7))
    lines = [rng.choice(vocab) for _ in range(rng.randint(len(vocab) + 2, 15))]
    return _transform(
        rng,
        words,
        (
            "Write the distinct lines of {f}, sorted alphabetically, one per line, to {o}.",
            "Sort the lines of {f} alphabetically, drop duplicates, and write the result to {o}.",
        ),
        "sort -u {f} > {o}",
        lines,
        sorted(set(lines)),
    )


def _reverse_lines(rng: random.Random, words: Sequence[str]) -> Drill:
    lines = _lines(rng, words, rng.randint(3, 8), most=3)
    return _transform(
        rng,
        words,
        (
            "Write the lines of {f} in reverse order (last line first) to {o}.",
            "Reverse the order of the lines in {f} and save them to {o}.",
        ),
        "tac {f} > {o}",
        lines,
        lines[::-1],
    )


def _first_line(rng: random.Random, words: Sequence[str]) -> Drill:
    lines = _lines(rng, words, rng.randint(3, 10))
    return _transform(
        rng,
        words,
        ("Write the first line of {f} to {o}.", "Copy only the first line of {f} into {o}."),
        "head -n 1 {f} > {o}",
        lines,
        lines[:1],
    )


def _plant(rng: random.Random, lines: list[str], word: str, at: Sequence[int]) -> None:
    """Insert ``word`` at a random place in each of the lines ``at``."""
    for i in at:
        ws = lines[i].split()
        ws.insert(rng.randint(0, len(ws)), word)
        lines[i] = " ".join(ws)


def _replace_word(rng: random.Random, words: Sequence[str]) -> Drill:
    name, old, new = rng.sample(words, 3)
    f = _file(rng, name)
    filler = [w for w in words if w not in (old, new)]
    lines = _lines(rng, filler, rng.randint(2, 6))
    _plant(rng, lines, old, rng.sample(range(len(lines)), rng.randint(1, len(lines))))
    want = [ln.replace(old, new) for ln in lines]
    return Drill(
        _say(
            rng,
            (
                "In {f}, replace the word {a} with {b}.",
                "Replace every {a} in {f} with {b}.",
                "Edit {f} so that each occurrence of {a} becomes {b}.",
            ),
            f=f,
            a=old,
            b=new,
        ),
        f"sed -i 's/{old}/{new}/g' {f}",
        f"c = read({f!r})\n"
        f"done(c is not None and c.rstrip('\\n').split('\\n') == {want!r}, found=c)\n",
        {f: _text(lines)},
    )


def _grep_count(rng: random.Random, words: Sequence[str]) -> Drill:
    a, b, p = rng.sample(words, 3)
    f, out = _file(rng, a), _file(rng, b)
    filler = [w for w in words if w != p]
    lines = _lines(rng, filler, rng.randint(5, 20))
    hits = rng.sample(range(len(lines)), rng.randint(1, len(lines) - 1))
    _plant(rng, lines, p, hits)
    want = str(len(hits))
    return Drill(
        _say(
            rng,
            (
                "Count the lines of {f} that contain the word {p} and write the number to {o}.",
                "Write to {o} how many lines in {f} contain {p}.",
            ),
            f=f,
            o=out,
            p=p,
        ),
        f"grep -c {p} {f} > {out}",
        f"c = read({out!r})\n"
        f"done(c is not None and c.strip() == {want!r}, want={want!r}, found=c)\n",
        {f: _text(lines)},
    )


def _max_number(rng: random.Random, words: Sequence[str]) -> Drill:
    a, b = rng.sample(words, 2)
    f, out = _file(rng, a), _file(rng, b)
    nums = rng.sample(range(-99, 1000), rng.randint(6, 20))
    want = str(max(nums))
    return Drill(
        _say(
            rng,
            (
                "{f} has one integer per line. Write the largest one to {o}.",
                "Write the largest number in {f} (one integer per line) to {o}.",
            ),
            f=f,
            o=out,
        ),
        f"sort -n {f} | tail -n 1 > {out}",
        f"c = read({out!r})\n"
        f"done(c is not None and c.strip() == {want!r}, want={want!r}, found=c)\n",
        {f: _text([str(n) for n in nums])},
    )


_FAMILIES: dict[str, Family] = {
    "write-word": _write_word,
    "make-dir": _make_dir,
    "nested-dirs": _nested_dirs,
    "copy-file": _copy_file,
    "rename-file": _rename_file,
    "delete-file": _delete_file,
    "empty-file": _empty_file,
    "append-line": _append_line,
    "count-lines": _count_lines,
    "count-words": _count_words,
    "uppercase": _uppercase,
    "sort-unique": _sort_unique,
    "reverse-lines": _reverse_lines,
    "replace-word": _replace_word,
    "grep-count": _grep_count,
    "max-number": _max_number,
    "first-line": _first_line,
}
DRILL_FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


def _at_level(drill: Drill, level: int, rng: random.Random, words: Sequence[str]) -> Drill:
    """``drill`` moved ``level`` directories deep, with root decoys of its inputs from
    level 2 (see the module docstring)."""
    if level == 0:
        return drill
    where = "/".join(rng.sample(words, level))
    files = {f"{where}/{rel}": text for rel, text in drill.files.items()}
    if not files:  # the directory must exist for an output-only skill
        files[f"{where}/notes.txt"] = _text(_lines(rng, words, 2))
    if level >= 2:
        for rel in drill.files:
            files[rel] = _text(_lines(rng, words, rng.randint(2, 4)))
    # The check runs inside the directory, which must be the real one (not a link to the
    # root the policy wrote to instead).
    checks = (
        f"if os.path.realpath({where!r}) != os.path.join(os.path.realpath('.'), {where!r}):\n"
        f"    done(False, missing={where!r})\n"
        f"os.chdir({where!r})\n{drill.checks}"
    )
    return Drill(
        f"Inside the directory {where}: {drill.instruction}",
        f"cd {where} && {drill.command}",
        checks,
        files,
    )


def _instances(family: str, split: str, count: int, seed: int, level: int = 0) -> list[Drill]:
    """``count`` distinct instances; instance ``n`` does not depend on ``count``."""
    stream = f"{DRILL_SUITE}:{seed}:{family}:{split}" + (f":L{level}" if level else "")
    rng = random.Random(stream)
    words = TRAIN_WORDS if split == "train" else TEST_WORDS
    out: list[Drill] = []
    seen: set[str] = set()
    for _ in range(count):
        for _try in range(100):  # small families (make-dir: 30 names) repeat now and then
            drill = _at_level(_FAMILIES[family](rng, words), level, rng, words)
            if drill.instruction not in seen:
                break
        seen.add(drill.instruction)
        out.append(drill)
    return out


def task_level(tags: Sequence[str]) -> int:
    """A task's difficulty level from its tags (``level-L``); 0 without one."""
    for tag in tags:
        if tag.startswith("level-") and tag[6:].isdigit():
            return int(tag[6:])
    return 0


def _write_task(
    root: Path, task_id: str, family: str, split: str, drill: Drill, level: int = 0
) -> None:
    root.mkdir()
    (root / "task.toml").write_text(
        _TOML.format(
            id=json.dumps(task_id),
            instruction=json.dumps(drill.instruction),
            split=split,
            family=family,
            level_tag=f', "level-{level}"' if level else "",
        ),
        encoding="utf-8",
    )
    for rel, text in drill.files.items():
        (root / "workspace").mkdir(exist_ok=True)
        (root / "workspace" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "workspace" / rel).write_text(text, encoding="utf-8")
    (root / "verify").mkdir()
    (root / "verify" / "verify.py").write_text(_VERIFY_HEAD + drill.checks, encoding="utf-8")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(
        f"#!/bin/sh\nset -e\n{drill.command}\n", encoding="utf-8"
    )


def generate_drills(
    out: Path,
    *,
    train_per_family: int = 6,
    test_per_family: int = 2,
    seed: int = 0,
    test_seed: int | None = None,
    levels: Sequence[int] = (0,),
) -> Path:
    """Write the claw-drill suite as native task directories under ``out``; return ``out``.

    ``levels``: the difficulties generated for every skill (0: the plain instances).
    ``test_seed``: the held-out instances' seed (default ``seed``); they are generated apart
    from the train instances either way, from the other half of the word pool.
    ``out`` must be missing or empty. The same arguments write the same bytes, and a larger
    count only adds instances (instance ``n`` of a family and split is the same for any count).
    """
    if train_per_family < 0 or test_per_family < 0:
        raise ValueError("train_per_family and test_per_family must be >= 0")
    if not levels or any(not 0 <= level <= 3 for level in levels):
        raise ValueError(f"levels must be some of 0, 1, 2, 3; got {list(levels)}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    seeds = {"train": seed, "test": seed if test_seed is None else test_seed}
    for family in DRILL_FAMILIES:
        for level in sorted(set(levels)):
            for split, count in (("train", train_per_family), ("test", test_per_family)):
                drills = _instances(family, split, count, seeds[split], level)
                for n, drill in enumerate(drills):
                    at = f"-L{level}" if level else ""
                    task_id = f"drill-{family}{at}-{split}-{n}"
                    _write_task(out / task_id, task_id, family, split, drill, level)
    return out


def drill_suite() -> Path:
    """The default claw-drill suite's directory, generated on first use (atomically)."""
    return cached_suite(f"{DRILL_SUITE}-v{DRILL_VERSION}", generate_drills)


def drill_levels_suite() -> Path:
    """claw-drill at levels 0, 1 and 2 (the curriculum's suite), generated on first use."""
    return cached_suite(
        f"{DRILL_LEVELS_SUITE}-v{DRILL_VERSION}",
        lambda out: generate_drills(out, levels=DRILL_LEVELS),
    )
