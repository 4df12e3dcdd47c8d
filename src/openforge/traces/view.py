"""``openforge traces show``: a rollout's paths, token by token, in the terminal and as HTML.

Every token of a path is one of: an observation (prompt, tool results: never trained),
trained (sampled by the policy and trained in this path), shared (sampled, but trained in
an earlier path), or masked (sampled by a call that is not trained: failed, forked under
``--mask-forks``). A path starting a new branch is marked as a fork. Calls made with a
judge's or a simulated user's key are listed apart, after the paths: they are never trained.
The reward-hack monitor's flags (traces/monitor.py) come first, under the header.
"""

from __future__ import annotations

import html as html_lib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openforge.store.schemas import TRAIN_SPLIT, CallRecord, Rollout, RolloutSelection
from openforge.traces.graph import DriftKind, Node, RolloutGraph
from openforge.traces.samples import TraceOptions, plan_rollout

if TYPE_CHECKING:
    from openforge.traces.source import CallSource

__all__ = [
    "Segment",
    "flag_lines",
    "load_decoder",
    "path_segments",
    "render_html",
    "render_rich",
    "serving_lines",
    "show",
]

Decoder = Callable[[list[int]], str]
_KINDS = ("observation", "trained", "shared", "masked")
_STYLE = {
    "observation": "dim",
    "trained": "bold green",
    "shared": "green italic",
    "masked": "red strike",
}
_CSS = {
    "observation": "color:#777",
    "trained": "background:#d4f7d4;color:#064",
    "shared": "background:#eef8ee;color:#064;font-style:italic",
    "masked": "background:#fbd9d9;color:#900;text-decoration:line-through",
}


@dataclass(slots=True, frozen=True)
class Segment:
    kind: str  # one of _KINDS
    call_id: str | None  # the call that sampled these tokens (None: observation)
    ids: list[int]


def path_segments(graph: RolloutGraph) -> list[tuple[list[Node], list[Segment]]]:
    """Each root-to-leaf path with its leaf's ids cut into runs of one kind."""
    trained: set[int] = set()
    out: list[tuple[list[Node], list[Segment]]] = []
    for path in graph.paths():
        leaf = path[-1].call
        ids = leaf.prompt_ids + leaf.output_ids
        kinds: list[tuple[str, str | None]] = [("observation", None)] * len(ids)
        for node in path:
            if node.excluded is not None:
                kind = "masked"
            elif id(node) in trained:
                kind = "shared"
            else:
                kind = "trained"
                trained.add(id(node))
            for k in range(node.prompt_len, node.full_len):
                kinds[k] = (kind, node.call.id)
        segments: list[Segment] = []
        start = 0
        for k in range(1, len(ids) + 1):
            if k == len(ids) or kinds[k] != kinds[start]:
                segments.append(Segment(kinds[start][0], kinds[start][1], ids[start:k]))
                start = k
        out.append((path, segments))
    return out


def load_decoder(model_dir: Path | None, served_model: str) -> Decoder:
    """Decode with the model's ``tokenizer.json``; ids as numbers when none can be found."""
    from tokenizers import Tokenizer

    candidates: list[Path] = [model_dir] if model_dir is not None else []
    if model_dir is None and served_model:
        candidates.append(Path(served_model))
        try:
            from openforge.models.registry import models_dir

            candidates.append(models_dir() / served_model)
        except ImportError:
            pass
    for c in candidates:
        if (c / "tokenizer.json").is_file():
            tok = Tokenizer.from_file(str(c / "tokenizer.json"))
            return lambda ids: tok.decode(ids, skip_special_tokens=False)
    return lambda ids: " ".join(str(i) for i in ids) + " "


def _header(path: list[Node], index: int) -> str:
    root = path[0]
    # A compaction call (its answer is the summary a later fork starts from) is marked.
    calls = " → ".join(
        f"#{n.call.seq}" + (" (compaction)" if n.call.render_info.get("compaction") else "")
        for n in path
    )
    fork = ""
    if root.drift == DriftKind.FORK:
        why = root.call.render_info.get("fork_reason") or "history does not extend any call"
        fork = f"  ⑂ fork at call #{root.call.seq}: {why}"
    return f"path {index + 1}: calls {calls}{fork}"


def _abbreviate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} … [{len(text) - limit} chars] … {text[-half:]}"


def flag_lines(rollout: Rollout) -> list[str]:
    """One line per monitor flag: severity, rule, where it matched and what."""
    return [f"{f.severity} {f.rule} at {f.where}: {f.evidence}" for f in rollout.flags]


def serving_lines(graph: RolloutGraph, limit: int = 300) -> list[str]:
    """One line per judge or simulated-user call: role, seq, status, what it was asked
    (the last message's text) and what it answered."""
    out: list[str] = []
    for call in graph.serving:
        messages = call.conversation.get("messages") or [{}]
        asked = _message_text(messages[-1])
        answered = str(call.completion.get("text") or call.error or "")
        out.append(
            f"{call.role} call #{call.seq} ({call.status}): asked "
            f"{_abbreviate(asked, limit)!r} → {_abbreviate(answered, limit)!r}"
        )
    return out


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def render_rich(rollout: Rollout, graph: RolloutGraph, decode: Decoder, limit: int = 600) -> None:
    """Print the rollout's paths to the terminal; long observations abbreviated."""
    from rich.console import Console
    from rich.text import Text

    console = Console()
    console.print(
        f"[bold]rollout {rollout.id}[/] status={rollout.status} reward={rollout.reward} "
        f"task={rollout.task_id} group={rollout.group_id} run={rollout.run_id} "
        f"split={rollout.split}  calls={len(graph.nodes)} "
        f"forks={graph.forks} retries={graph.retries} drift={len(graph.drift)}"
    )
    if rollout.split not in (None, TRAIN_SPLIT):
        console.print(
            Text(f"held out (split {rollout.split}): never training data", style="bold yellow")
        )
    flags = flag_lines(rollout)
    if flags:
        console.print(Text(f"flagged by the reward-hack monitor ({len(flags)}):", style="bold red"))
        for line in flags:
            console.print(Text("  " + line, style="red"))
    legend = Text("legend: ")
    for kind in _KINDS:
        legend.append(kind, style=_STYLE[kind])
        legend.append("  ")
    console.print(legend)
    for i, (path, segments) in enumerate(path_segments(graph)):
        fork = path[0].drift == DriftKind.FORK
        console.print(Text(_header(path, i), style="bold yellow" if fork else "bold"))
        body = Text()
        for seg in segments:
            text = decode(seg.ids)
            if seg.kind == "observation":
                text = _abbreviate(text, limit)
            body.append(text, style=_STYLE[seg.kind])
        console.print(body)
    for d in graph.drift:
        console.print(
            f"[magenta]drift[/] call {d.call_id} (#{d.seq}): message {d.message}, "
            f"token {d.position}"
        )
    lines = serving_lines(graph)
    if lines:
        console.print(Text("judge and simulated-user calls (never trained):", style="bold cyan"))
        for line in lines:
            console.print(Text(line, style="cyan"))


def render_html(rollout: Rollout, graph: RolloutGraph, decode: Decoder) -> str:
    """A self-contained page (inline CSS, no scripts) of the same view."""
    esc = html_lib.escape
    css = "".join(f".{k}{{{v}}}" for k, v in _CSS.items())
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>rollout {esc(rollout.id)}</title><style>",
        "body{font-family:sans-serif;margin:2em}pre{white-space:pre-wrap;font-size:13px;"
        "border:1px solid #ccc;padding:1em}h2.fork{color:#b60}.flagged{color:#b00}",
        css,
        "</style></head><body>",
        f"<h1>rollout {esc(rollout.id)}</h1>",
        f"<p>status {esc(str(rollout.status))} · reward {rollout.reward} · task "
        f"{esc(str(rollout.task_id))} · group {esc(str(rollout.group_id))} · forks "
        f"{graph.forks} · retries {graph.retries} · drifted turns {len(graph.drift)}</p><p>",
        *(f"<span class='{k}'>{k}</span> " for k in _KINDS),
        "</p>",
    ]
    flags = flag_lines(rollout)
    if flags:
        parts.append("<h2 class='flagged'>flagged by the reward-hack monitor</h2><ul>")
        parts.extend(f"<li class='flagged'>{esc(line)}</li>" for line in flags)
        parts.append("</ul>")
    for i, (path, segments) in enumerate(path_segments(graph)):
        cls = "fork" if path[0].drift == DriftKind.FORK else ""
        parts.append(f"<h2 class='{cls}'>{esc(_header(path, i))}</h2><pre>")
        for seg in segments:
            title = f" title='call {esc(seg.call_id)}'" if seg.call_id else ""
            parts.append(f"<span class='{seg.kind}'{title}>{esc(decode(seg.ids))}</span>")
        parts.append("</pre>")
    if graph.drift:
        parts.append("<h2>drift</h2><ul>")
        parts.extend(
            f"<li>call {esc(d.call_id)} (#{d.seq}): message {d.message}, token {d.position}</li>"
            for d in graph.drift
        )
        parts.append("</ul>")
    lines = serving_lines(graph)
    if lines:
        parts.append("<h2>judge and simulated-user calls (never trained)</h2><ul>")
        parts.extend(f"<li>{esc(line)}</li>" for line in lines)
        parts.append("</ul>")
    parts.append("</body></html>")
    return "".join(parts)


def _plan_view(rollout: Rollout, calls: list[CallRecord]) -> RolloutGraph:
    return plan_rollout(rollout, calls, TraceOptions(include_running=True)).graph


def _open(store_path: str | Path) -> CallSource:
    """The store at ``store_path``, opened for reading; the error and exit status 1 when
    it cannot be."""
    import typer

    from openforge.store.base import StoreError
    from openforge.traces.source import open_store

    try:
        return open_store(store_path)
    except (FileNotFoundError, StoreError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None


async def show(
    store_path: str | Path, rollout_id: str, html: Path | None, model_dir: Path | None
) -> None:
    """Print one rollout of the store at ``store_path``; write ``html`` too when given."""
    import typer

    from openforge.store.base import RolloutNotFound

    store = _open(store_path)
    try:
        rollout = await store.get_rollout(rollout_id)
        calls = await store.calls(rollout_id)
    except RolloutNotFound:
        typer.echo(f"error: no rollout {rollout_id!r} in {store_path}", err=True)
        raise typer.Exit(1) from None
    finally:
        await store.close()
    graph = _plan_view(rollout, calls)
    served = next((c.served_model for c in calls if c.served_model), "")
    decode = load_decoder(model_dir, served)
    render_rich(rollout, graph, decode)
    if html is not None:
        html.write_text(render_html(rollout, graph, decode), encoding="utf-8")
        typer.echo(f"wrote {html}")


async def list_rollouts(store_path: str | Path, selection: RolloutSelection) -> None:
    """Print the id, run, split, task, status and reward of each rollout ``selection``
    takes, and what it leaves out, by split."""
    import typer

    from openforge.traces.selection import split_counts

    store = _open(store_path)
    try:
        every = await store.rollouts()
        taken = await store.rollouts(selection=selection)
    finally:
        await store.close()
    for r in taken:
        reward = "-" if r.reward is None else f"{r.reward:g}"
        typer.echo(
            f"{r.id}  run={r.run_id or '-'}  split={r.split or 'none'}  task={r.task_id or '-'}"
            f"  {r.status}  reward={reward}"
        )
    typer.echo(split_counts(every, taken).line())
