"""``openforge traces flag``: the reward-hack monitor run again over a whole store.

The orchestrator flags each rollout as it finishes; this reruns the rules (new ones, a
user's file, a fixed false positive) over every finished rollout of an existing store and
replaces each rollout's flags with what they find now. The harness transcripts are not in
the store: they are in the orchestrator's run directories (``results.jsonl`` names each
rollout, ``rollouts/<task>/<sample>/transcript.json`` holds its transcript as the harness
wrote it, ``run.json`` names the harness whose adapter decodes it), which
:func:`run_transcripts` finds. A rollout whose transcript is not at hand keeps the flags an
earlier run found in its transcript, for rules still in force.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from openforge.harnesses.base import HarnessError
from openforge.harnesses.registry import decode_transcript
from openforge.store.base import Store
from openforge.store.schemas import TERMINAL, Flag, Rollout
from openforge.tasks.transcript import Transcript
from openforge.traces.monitor import CallContent, RuleSet, scan

__all__ = ["FlagReport", "RunTranscript", "flag_store", "run_transcripts"]

_TRANSCRIPT_PLACE = "transcript "  # how a flag found in a transcript names its place


@dataclass(slots=True)
class FlagReport:
    """What a rerun found: counts, and each flagged rollout's id, task and rule ids."""

    checked: int = 0
    with_transcript: int = 0
    changed: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)
    flagged: list[tuple[str, str | None, list[str]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunTranscript:
    """A rollout's transcript file in a run directory and the harness that wrote it."""

    path: Path
    harness: str


def _harness(run_dir: Path) -> str:
    """The harness a run directory's ``run.json`` names ("" when it names none)."""
    try:
        meta = orjson.loads((run_dir / "run.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return ""
    name = meta.get("harness") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def run_transcripts(run_dirs: Iterable[Path]) -> dict[str, RunTranscript]:
    """Rollout id → its transcript file, from every orchestrator run directory under
    ``run_dirs`` (a training run's ``rollouts/`` holds one per step)."""
    out: dict[str, RunTranscript] = {}
    for root in run_dirs:
        for results in sorted(Path(root).rglob("results.jsonl")):
            harness = _harness(results.parent)
            for line in results.read_bytes().splitlines():
                try:
                    res = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # a line torn by a crash mid-write
                rid, task, sample = res.get("rollout_id"), res.get("task_id"), res.get("sample")
                if not isinstance(rid, str) or not isinstance(task, str):
                    continue
                path = results.parent / "rollouts" / task / str(sample) / "transcript.json"
                if path.is_file():
                    out[rid] = RunTranscript(path, harness)
    return out


def _transcript(found: RunTranscript | None) -> Transcript | None:
    """The transcript decoded by its harness's adapter; None when it cannot be read."""
    if found is None:
        return None
    try:
        data = orjson.loads(found.path.read_bytes())
        return decode_transcript(found.harness, data) if isinstance(data, dict) else None
    except (OSError, orjson.JSONDecodeError, HarnessError):
        return None


def _kept(rollout: Rollout, rules: RuleSet) -> list[Flag]:
    """The rollout's flags from a transcript this rerun does not have, for rules in force."""
    ids = set(rules.ids())
    return [f for f in rollout.flags if f.where.startswith(_TRANSCRIPT_PLACE) and f.rule in ids]


async def flag_store(
    store: Store, rules: RuleSet, transcripts: Mapping[str, RunTranscript], write: bool = True
) -> FlagReport:
    """Run ``rules`` over every finished rollout of ``store`` (with its transcript where
    ``transcripts`` has one) and, with ``write``, replace the flags that changed."""
    report = FlagReport()
    for rollout in await store.rollouts(statuses=sorted(TERMINAL)):
        calls = await store.calls(rollout.id, tokens=False)
        transcript = _transcript(transcripts.get(rollout.id))
        report.checked += 1
        report.with_transcript += transcript is not None
        flags = scan(rules, [CallContent.of(c) for c in calls], transcript)
        if transcript is None:
            found = {f.rule for f in flags}
            flags += [f for f in _kept(rollout, rules) if f.rule not in found]
            flags.sort(key=lambda f: (-f.severity.rank, f.rule))
        if flags:
            report.flagged.append((rollout.id, rollout.task_id, [f.rule for f in flags]))
            report.by_rule.update(f.rule for f in flags)
        if flags != rollout.flags:
            report.changed += 1
            if write:
                await store.flag_rollout(rollout.id, flags)
    return report
