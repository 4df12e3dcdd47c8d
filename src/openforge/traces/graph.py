"""The rollout graph: a rollout's recorded calls placed by token prefix.

A call whose prompt ids begin with an earlier call's prompt ids followed by that call's
output ids *extends* that call (its parent); any other call starts a new branch (a root):
compaction, an edited history, a subagent with its own system prompt, a new session.
Placement reads only the tokens (and ``seq`` to break ties), never arrival order, so
parallel calls (subagents) land where their tokens say.

Calls repeating an earlier call's prompt exactly (SDK retries, resumed streams) are
deduplicated first: one node per distinct sampled output, the last completed one kept.

Speed: ids are packed once to int32 bytes, and a call's candidate parents are found by
dictionary look-ups of its prompt's byte prefix at each distinct full length of the
other calls (hashing and comparing in C), longest first; lengths whose only calls are
already-known ancestors of the chosen parent are skipped, so a clean linear rollout
costs about one look-up per call.
"""

from __future__ import annotations

import bisect
import enum
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openforge.store.schemas import CallRecord, CallStatus

__all__ = [
    "TEACHER_ENGINE",
    "DriftKind",
    "DriftNote",
    "Node",
    "RolloutGraph",
    "build_graph",
    "drift_notes",
    "retry_header_count",
]

TEACHER_ENGINE = "upstream"  # calls answered by a teacher API: SFT data, never RL samples


class DriftKind(enum.StrEnum):
    """How a call's prompt relates to the calls before it."""

    CLEAN = "clean"  # extends its parent's prompt + output token-exactly (or is the first root)
    REALIGN = "realign"  # extends its parent; the renderer re-aligned drifted assistant turns
    FORK = "fork"  # no earlier call's prompt + output is a prefix: a new branch


@dataclass(slots=True, frozen=True)
class DriftNote:
    """An assistant turn the harness re-sent whose text re-tokenizes differently."""

    call_id: str
    seq: int
    message: int  # index of the drifted message in the call's conversation
    position: int  # token position in the call's prompt where the drift starts


@dataclass(slots=True, eq=False)
class Node:
    """One distinct (prompt, output) of a rollout: a call after retry deduplication."""

    call: CallRecord
    prompt_key: bytes  # prompt ids as int32 bytes
    full_key: bytes  # prompt + output ids as int32 bytes
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)  # ids of the calls this one superseded
    drift: DriftKind = DriftKind.CLEAN
    ambiguous: bool = False  # another, unrelated call's tokens were also a prefix
    excluded: str | None = None  # why this node's output is not trained (None: trained)
    depth: int = 0

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_key) // 4

    @property
    def full_len(self) -> int:
        return len(self.full_key) // 4


@dataclass(slots=True)
class RolloutGraph:
    """A rollout's calls as a forest of prefix-extension trees."""

    nodes: list[Node]  # placement order: by prompt length, then seq
    roots: list[Node]  # by seq; the first is the rollout's main branch
    teacher: list[CallRecord]  # engine == "upstream": never RL samples
    retries: int  # calls dropped as repeats of another call's prompt
    ambiguous: int  # nodes with more than one unrelated candidate parent
    drift: list[DriftNote]

    @property
    def forks(self) -> int:
        """New branches beyond the first root."""
        return max(0, len(self.roots) - 1)

    def paths(self) -> list[list[Node]]:
        """Every root-to-leaf path, depth first, children in ``seq`` order."""
        out: list[list[Node]] = []
        for root in self.roots:
            stack: list[tuple[Node, list[Node]]] = [(root, [root])]
            while stack:
                node, path = stack.pop()
                if not node.children:
                    out.append(path)
                    continue
                for child in reversed(node.children):
                    stack.append((child, [*path, child]))
        return out


def _pack(ids: Sequence[int]) -> bytes:
    return array("i", ids).tobytes()


def _dedup(calls: Iterable[CallRecord]) -> tuple[list[Node], int]:
    """One node per distinct sampled output of each distinct prompt; count what was dropped.

    Among calls sharing a prompt, completed (``ok``) calls supersede failed ones; completed
    calls with the same output collapse to the last one (highest ``seq``). Where no call
    of the prompt completed, the last attempt stays as an untrained node so that any call
    built on its partial output still finds its parent.
    """
    by_prompt: dict[bytes, list[CallRecord]] = {}
    for call in calls:
        by_prompt.setdefault(_pack(call.prompt_ids), []).append(call)
    nodes: list[Node] = []
    dropped = 0
    for prompt_key, group in by_prompt.items():
        group.sort(key=lambda c: c.seq)
        ok = [c for c in group if c.status == CallStatus.OK]
        keep: dict[bytes, Node] = {}
        superseded: list[str] = []
        for call in ok or group[-1:]:
            full_key = prompt_key + _pack(call.output_ids)
            previous = keep.get(full_key)
            if previous is not None:
                superseded.extend([*previous.retries, previous.call.id])
            keep[full_key] = Node(call, prompt_key, full_key)
        kept_ids = {n.call.id for n in keep.values()}
        superseded.extend(c.id for c in group if c.id not in kept_ids and c.id not in superseded)
        dropped += len(group) - len(keep)
        last = max(keep.values(), key=lambda n: n.call.seq)
        last.retries = superseded
        nodes.extend(keep.values())
    nodes.sort(key=lambda n: (len(n.prompt_key), n.call.seq))
    return nodes, dropped


def _ancestors(node: Node) -> set[int]:
    out: set[int] = set()
    cur: Node | None = node
    while cur is not None:
        out.add(id(cur))
        cur = cur.parent
    return out


def _place(nodes: list[Node]) -> int:
    """Link each node to its parent (longest prefix, then lowest seq); return ambiguous count."""
    by_len: dict[int, dict[bytes, list[Node]]] = {}
    for n in nodes:
        by_len.setdefault(len(n.full_key), {}).setdefault(n.full_key, []).append(n)
    lengths = sorted(by_len)
    ambiguous = 0
    # Ascending prompt length: a parent's prompt is strictly shorter, so it is placed first.
    for node in nodes:
        plen = len(node.prompt_key)
        chosen: Node | None = None
        ancestors: set[int] = set()
        unrelated = False
        for i in range(bisect.bisect_right(lengths, plen) - 1, -1, -1):
            bucket = by_len[lengths[i]]
            if chosen is not None and all(id(m) in ancestors for ms in bucket.values() for m in ms):
                continue
            hits = bucket.get(node.prompt_key[: lengths[i]])
            if not hits:
                continue
            hits = [h for h in hits if len(h.prompt_key) < plen]
            if not hits:
                continue
            if chosen is None:
                chosen = min(hits, key=lambda h: h.call.seq)
                ancestors = _ancestors(chosen)
                unrelated = len(hits) > 1
            elif any(id(h) not in ancestors for h in hits):
                unrelated = True
        if chosen is not None:
            node.parent = chosen
            node.depth = chosen.depth + 1
            chosen.children.append(node)
        node.ambiguous = unrelated
        ambiguous += unrelated
    return ambiguous


def drift_notes(call: CallRecord) -> list[DriftNote]:
    """The drifted assistant turns the renderer recorded in ``render_info["drift"]``."""
    raw: Any = call.render_info.get("drift") or []
    out: list[DriftNote] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict):
                out.append(
                    DriftNote(
                        call.id,
                        call.seq,
                        int(item.get("message", -1)),
                        int(item.get("position", -1)),
                    )
                )
    return out


def retry_header_count(call: CallRecord) -> int:
    """The SDK's own retry counter (``x-stainless-retry-count``), 0 when absent."""
    headers: Any = call.harness.get("headers", call.harness)
    value = headers.get("x-stainless-retry-count") if isinstance(headers, dict) else None
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def build_graph(calls: Iterable[CallRecord]) -> RolloutGraph:
    """Place a rollout's calls (in any order) into its graph. Pure: calls are not modified."""
    teacher: list[CallRecord] = []
    policy: list[CallRecord] = []
    for call in calls:
        (teacher if call.engine == TEACHER_ENGINE else policy).append(call)
    teacher.sort(key=lambda c: c.seq)
    nodes, retries = _dedup(policy)
    ambiguous = _place(nodes)
    for n in nodes:
        n.children.sort(key=lambda c: c.call.seq)
    roots = sorted((n for n in nodes if n.parent is None), key=lambda n: n.call.seq)
    notes: list[DriftNote] = []
    for n in nodes:
        mine = drift_notes(n.call)
        notes.extend(mine)
        if n.parent is None:
            n.drift = DriftKind.CLEAN if n is roots[0] else DriftKind.FORK
        elif mine:
            n.drift = DriftKind.REALIGN
        if n.call.status != CallStatus.OK:
            n.excluded = str(n.call.status)
    notes.sort(key=lambda d: (d.seq, d.message))
    return RolloutGraph(nodes, roots, teacher, retries, ambiguous, notes)
