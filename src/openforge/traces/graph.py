"""The rollout graph: a rollout's recorded calls placed by token prefix.

A call whose prompt ids begin with an earlier call's prompt ids followed by that call's
output ids *extends* that call (its parent); any other call starts a new branch (a root):
compaction, an edited history, a subagent with its own system prompt, a new session.
Placement reads only the tokens (and ``seq`` to break ties), never arrival order, so
parallel calls (subagents) land where their tokens say.

Calls repeating an earlier call's prompt exactly (SDK retries, resumed streams) are
deduplicated first: one node per distinct sampled output, the last completed one kept.

Speed: every node is indexed by its full length and the last 16 ids of its prompt +
output; a call's candidate parents are found by looking up its prompt's ids ending at
each distinct full length (longest first) and confirmed by list comparison (C speed).
Lengths whose only nodes are already-known ancestors of the chosen parent are skipped,
so a clean linear rollout costs about one look-up per call, and no id list is copied
into another form.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from openforge.store.schemas import SERVING_ROLES, CallRecord, CallRole, CallStatus

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
    prompt_len: int
    full_len: int  # prompt + output
    tail: tuple[int, ...]  # the last _TAIL ids of prompt + output: the look-up fingerprint
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    retries: list[str] = field(default_factory=list)  # ids of the calls this one superseded
    drift: DriftKind = DriftKind.CLEAN
    ambiguous: bool = False  # another, unrelated call's tokens were also a prefix
    excluded: str | None = None  # why this node's output is not trained (None: trained)
    depth: int = 0

    def is_prefix_of(self, ids: list[int]) -> bool:
        """Whether ``ids`` begins with this node's prompt + output (C-speed list compares)."""
        c = self.call
        return (
            len(ids) >= self.full_len
            and ids[self.prompt_len : self.full_len] == c.output_ids
            and ids[: self.prompt_len] == c.prompt_ids
        )


@dataclass(slots=True)
class RolloutGraph:
    """A rollout's calls as a forest of prefix-extension trees."""

    nodes: list[Node]  # placement order: by prompt length, then seq
    roots: list[Node]  # by seq; the first is the rollout's main branch
    teacher: list[CallRecord]  # engine == "upstream", retries collapsed: never RL samples
    retries: int  # calls dropped as repeats of another call's prompt (teacher calls too)
    ambiguous: int  # nodes with more than one unrelated candidate parent
    drift: list[DriftNote]
    # A judge's and a simulated user's calls (role judge / user): never any kind of sample.
    serving: list[CallRecord] = field(default_factory=list)

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


_TAIL = 16


def _node(call: CallRecord) -> Node:
    p, o = call.prompt_ids, call.output_ids
    return Node(call, len(p), len(p) + len(o), tuple((p[-_TAIL:] + o)[-_TAIL:]))


def _dedup(calls: Iterable[CallRecord]) -> tuple[list[Node], int]:
    """One node per distinct sampled output of each distinct prompt; count what was dropped.

    Among calls sharing a prompt, completed (``ok``) calls supersede failed ones; completed
    calls with the same output collapse to the last one (highest ``seq``). Where no call
    of the prompt completed, the last attempt stays as an untrained node so that any call
    built on its partial output still finds its parent.
    """
    # Prompts are bucketed by (length, last ids) and compared in full only within a bucket.
    buckets: dict[tuple[int, tuple[int, ...]], list[list[CallRecord]]] = {}
    for call in calls:
        p = call.prompt_ids
        groups = buckets.setdefault((len(p), tuple(p[-_TAIL:])), [])
        for g in groups:
            if g[0].prompt_ids == p:
                g.append(call)
                break
        else:
            groups.append([call])
    nodes: list[Node] = []
    dropped = 0
    for group in (g for gs in buckets.values() for g in gs):
        group.sort(key=lambda c: c.seq)
        ok = [c for c in group if c.status == CallStatus.OK]
        keep: dict[tuple[int, ...], Node] = {}
        superseded: list[str] = []
        for call in ok or group[-1:]:
            out = tuple(call.output_ids)
            previous = keep.get(out)
            if previous is not None:
                superseded.extend([*previous.retries, previous.call.id])
            keep[out] = _node(call)
        kept_ids = {n.call.id for n in keep.values()}
        superseded.extend(c.id for c in group if c.id not in kept_ids and c.id not in superseded)
        dropped += len(group) - len(keep)
        last = max(keep.values(), key=lambda n: n.call.seq)
        last.retries = superseded
        nodes.extend(keep.values())
    nodes.sort(key=lambda n: (n.prompt_len, n.call.seq))
    return nodes, dropped


def _dedup_teacher(calls: list[CallRecord]) -> tuple[list[CallRecord], int]:
    """Teacher calls by ``seq``, retries of one (prompt, answer) collapsed like policy calls.

    Only calls with recorded ids are compared (older gateways stored none): an SDK retry
    of a teacher call gives one SFT example, not two.
    """
    with_ids = [c for c in calls if c.prompt_ids]
    nodes, dropped = _dedup(with_ids)
    kept = [n.call for n in nodes] + [c for c in calls if not c.prompt_ids]
    kept.sort(key=lambda c: c.seq)
    return kept, dropped


def _ancestors(node: Node) -> set[int]:
    out: set[int] = set()
    cur: Node | None = node
    while cur is not None:
        out.add(id(cur))
        cur = cur.parent
    return out


def _candidates(node: Node, bucket: dict[tuple[int, ...], list[Node]], length: int) -> list[Node]:
    prompt = node.call.prompt_ids
    hits = bucket.get(tuple(prompt[max(0, length - _TAIL) : length]))
    if not hits:
        return []
    return [h for h in hits if h.prompt_len < node.prompt_len and h.is_prefix_of(prompt)]


def _place(nodes: list[Node]) -> int:
    """Link each node to its parent (longest prefix, then lowest seq); return ambiguous count."""
    by_len: dict[int, dict[tuple[int, ...], list[Node]]] = {}
    for n in nodes:
        by_len.setdefault(n.full_len, {}).setdefault(n.tail, []).append(n)
    lengths = sorted(by_len)
    ambiguous = 0
    # Ascending prompt length: a parent's prompt is strictly shorter, so it is placed first.
    for node in nodes:
        chosen: Node | None = None
        ancestors: set[int] = set()
        unrelated = False
        for i in range(bisect.bisect_right(lengths, node.prompt_len) - 1, -1, -1):
            bucket = by_len[lengths[i]]
            if chosen is not None and all(id(m) in ancestors for ms in bucket.values() for m in ms):
                continue
            hits = _candidates(node, bucket, lengths[i])
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
    serving: list[CallRecord] = []
    for call in calls:
        if call.role in SERVING_ROLES:
            serving.append(call)
        elif call.engine == TEACHER_ENGINE or call.role is CallRole.TEACHER:
            teacher.append(call)
        else:
            policy.append(call)
    teacher, teacher_retries = _dedup_teacher(teacher)
    nodes, retries = _dedup(policy)
    retries += teacher_retries
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
        elif len(n.call.output_logprobs) != len(n.call.output_ids):
            # Training needs each sampled token's own logprob; never guess or shift them.
            n.excluded = "logprobs_missing"
    notes.sort(key=lambda d: (d.seq, d.message))
    serving.sort(key=lambda c: c.seq)
    return RolloutGraph(nodes, roots, teacher, retries, ambiguous, notes, serving)
