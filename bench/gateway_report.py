"""bench/gateway.py's tables (one per section), printed as the runs end."""

from __future__ import annotations

import itertools
import statistics
import sys
from collections import Counter
from typing import Any

from intervals import ci95  # bench/intervals.py, beside this file

Rows = dict[tuple[Any, ...], dict[str, Any]]


def _line(*cols: str) -> None:
    print("".join(cols), flush=True)


def _errors(rows: Rows) -> None:
    for key, r in rows.items():
        if r.get("errors"):
            print(f"# {key}: {r['errors']} errors, first: {r['first_error']}", file=sys.stderr)


def _mean_ci(values: list[float], unit: str = "", digits: int = 2) -> str:
    """``mean ± half-width`` of a 95% t interval (the mean alone for one value)."""
    mean, half = ci95(values)
    if len(values) < 2:
        return f"{mean:+.{digits}f}{unit}"
    return f"{mean:+.{digits}f} ± {half:.{digits}f}{unit}"


def _growth(turns: list[dict[str, Any]]) -> list[float]:
    """Each rollout's growth of CPU per call, in ms per 100 KB of body: the Theil-Sen slope
    (the median of the slopes between every two of its calls), which one call slowed by a
    checkpoint or a collection does not move. The first call (nothing to extend) is left
    out."""
    later = [t for t in turns if t["turn"] > 1]
    out = []
    for r in range(len(later[0]["cpu_calls_ms"])):
        xs = [t["body_kb"] / 100 for t in later]
        ys = [t["cpu_calls_ms"][r] for t in later]
        out.append(statistics.median(
            (ys[j] - ys[i]) / (xs[j] - xs[i]) for i, j in itertools.combinations(range(len(xs)), 2)
        ))  # fmt: skip
    return out


def profile_table(raw: str, top: int = 40) -> None:
    """Self and inclusive shares of py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in filter(None, raw.splitlines()):
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():  # a thread name with a space splits its line: no count on it
            continue
        frames = stack.split(";")
        total += int(n)
        own[frames[-1]] += int(n)
        for f in set(frames):
            incl[f] += int(n)
    print(f"\n## py-spy: {total} samples; self")
    for f, n in own.most_common(top):
        print(f"{100 * n / total:5.1f}% {f}")
    print("## inclusive")
    for f, n in incl.most_common(top * 2):
        print(f"{100 * n / total:5.1f}% {f}")


class Report:
    """Prints each section's table."""

    def headline(self, rows: Rows, modes: tuple[bool, ...], concs: tuple[int, ...]) -> None:
        """Agent body, every target."""
        body = next(iter(rows.values()))["body_kb"]
        print(f"\n## headline: agent body ({body:.1f} KB, 3 KB new per call), vLLM engine client")
        _line(
            f"{'mode':<7}{'conc':>5} {'target':<10}{'calls/s':>8}{'p50 ms':>9}{'p99 ms':>9}",
            f"{'add p50':>9}{'add p99':>9}{'cpu ms':>8}{'×rllm':>7}{'load':>6}{'err':>5}",
            f"{'add p99 w/ start':>17}{'wave s':>7}",
        )
        for stream in modes:
            for conc in concs:
                base = rows[("engine", stream, conc)]
                peer = rows.get(("rllm", stream, conc))
                for name in ("engine", "openforge", "of-fresh", "rllm", "before", "bef-fresh"):
                    r = rows.get((name, stream, conc))
                    if r is None:
                        continue
                    add50 = add99 = add99_start = ratio = ""
                    if name != "engine":
                        add50 = f"{r['p50_ms'] - base['p50_ms']:+.2f}"
                        add99 = f"{r['p99_ms'] - base['p99_ms']:+.1f}"
                        add99_start = f"{r['p99_with_start_ms'] - base['p99_with_start_ms']:+.1f}"
                    if peer and name != "engine" and name != "rllm":
                        ratio = f"{r['rps'] / max(peer['rps'], 1e-9):.2f}"
                    _line(
                        f"{'stream' if stream else 'json':<7}{conc:>5} {name:<10}",
                        f"{r['rps']:>8.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.1f}",
                        f"{add50:>9}{add99:>9}{r['cpu_ms']:>8.2f}{ratio:>7}",
                        f"{r['load']:>6.1f}{r['errors']:>5}",
                        f"{add99_start:>17}{r['first_wave_s']:>7.2f}",
                    )
        _errors(rows)
        print(
            "p99 over calls started once every connection had its first answer; "
            "'w/ start': over calls done after 0.5 s, the first wave (every connection's "
            "first call at once, 'wave s' long) included"
        )

    def paired(
        self, pairs: dict[tuple[bool, int], list[tuple[dict[str, Any], ...]]], case: str = "rollout"
    ) -> None:
        """Paired differences, this checkout minus ``before``, with 95% intervals."""
        what = "a fresh rollout per call" if case == "fresh" else "a rollout per connection"
        print(f"\n## paired: this checkout - before (agent body, {what}), order alternated")
        _line(
            f"{'mode':<7}{'conc':>5}{'pairs':>6}{'cpu ms now':>12}{'before':>8}",
            f"{'diff ± 95%':>16}{'now less':>9}{'add p50 diff ± 95%':>20}",
            f"{'add p99 diff ± 95%':>21}{'calls/s diff':>13}",
        )
        for (stream, conc), runs in pairs.items():
            cpu = [now["cpu_ms"] - before["cpu_ms"] for _, now, before in runs]
            p50 = [now["p50_ms"] - before["p50_ms"] for _, now, before in runs]
            p99 = [now["p99_ms"] - before["p99_ms"] for _, now, before in runs]
            rps = [now["rps"] - before["rps"] for _, now, before in runs]
            _line(
                f"{'stream' if stream else 'json':<7}{conc:>5}{len(runs):>6}",
                f"{statistics.fmean(n['cpu_ms'] for _, n, _ in runs):>12.2f}",
                f"{statistics.fmean(b['cpu_ms'] for _, _, b in runs):>8.2f}",
                f"{_mean_ci(cpu):>16}{sum(d < 0 for d in cpu):>5}/{len(cpu):<3}",
                f"{_mean_ci(p50, 'ms'):>20}{_mean_ci(p99, 'ms', 0):>21}{_mean_ci(rps, '', 0):>13}",
            )
            for engine, now, before in runs:
                _errors({("engine",): engine, ("now",): now, ("before",): before})

    def recorded(self, rows: Rows) -> None:
        """Recorded harness bodies through OpenForge."""
        print("\n## recorded bodies + a tool turn (3 KB new per call), OpenForge")
        _line(
            f"{'body':<8}{'KB':>6}{'mode':>7}{'conc':>5} {'target':<10}{'calls/s':>8}",
            f"{'p50 ms':>9}{'p99 ms':>9}{'cpu ms':>8}{'load':>6}{'err':>5}",
        )
        for (workload, stream, conc, name), r in rows.items():
            _line(
                f"{workload:<8}{r['body_kb']:>6.1f}{'stream' if stream else 'json':>7}{conc:>5}",
                f" {name:<10}",
                f"{r['rps']:>8.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.1f}{r['cpu_ms']:>8.2f}",
                f"{r['load']:>6.1f}{r['errors']:>5}",
            )
        _errors(rows)

    def sizes(self, rows: Rows, names: list[str]) -> None:
        """Cost per call by new-content size."""
        print("\n## cost per call by new content (agent body, c=1, JSON)")
        _line(f"{'new KB':>7}{'body KB':>9}", *(f"{n + ' p50':>16}{'cpu ms':>8}" for n in names))
        for size in sorted({k[1] for k in rows}):
            cols = []
            for n in names:
                r = rows[(n, size)]
                cols.append(f"{r['p50_ms']:>16.2f}{r['cpu_ms']:>8.2f}")
            body = rows[(names[0], size)]["body_kb"]
            _line(f"{size / 1000:>7.0f}{body:>9.1f}", *cols, f"  load {r['load']:.1f}")
        _errors(rows)

    def history(self, results: dict[str, dict[str, Any]], workload: str = "agent") -> None:
        """Latency and gateway CPU by turn of growing rollouts, per target side by side,
        and how fast the CPU per call grows with the history (per rollout, then over them)."""
        names = list(results)
        n = len(results[names[0]]["turns"][0]["cpu_calls_ms"])
        print(
            f"\n## {workload}: {n} rollouts growing by an answer + 3 KB per call (c=1, JSON);"
            " medians"
        )
        print(
            f"{'turn':>5}{'body KB':>9}" + "".join(f"{n + ' p50':>16}{'cpu ms':>8}" for n in names)
        )
        by = {n: {t["turn"]: t for t in r["turns"]} for n, r in results.items()}
        for turn, t in by[names[0]].items():
            if turn in (1, 2, 3, 6, 12, 24, 36, 48):
                line = f"{turn:>5}{t['body_kb']:>9.1f}"
                for n in names:
                    u = by[n].get(turn)
                    if u:
                        ms, cpu = statistics.median(u["ms"]), statistics.median(u["cpu_calls_ms"])
                        line += f"{ms:>16.2f}{cpu:>8.2f}"
                    else:
                        line += " " * 24
                print(line)
        slopes = {n: _growth(r["turns"]) for n, r in results.items()}
        for n, r in results.items():
            print(f"{n}: load {r['load']:.1f}; cpu ms/call over all turns {r['cpu_ms']:.2f};"
                  f" store {r['store_mb']:.1f} MB for {r['calls']} calls; cpu ms per 100 KB"
                  f" of history {_mean_ci(slopes[n], digits=3)}")  # fmt: skip
            _errors({("history", n): r})
        if len(names) == 2 and len(slopes[names[0]]) == len(slopes[names[1]]):
            diff = [a - b for a, b in zip(slopes[names[0]], slopes[names[1]], strict=True)]
            print(
                f"{names[0]} - {names[1]} per 100 KB, paired by rollout: {_mean_ci(diff, digits=3)}"
            )

    def workers(self, rows: Rows, n: int) -> None:
        """Several gateway processes on one port."""
        print(f"\n## gateway workers on one port (agent body); {n} workers share cores 0-{n - 1}")
        _line(
            f"{'target':<11}{'mode':>7}{'conc':>5}{'calls/s':>8}{'per core':>9}",
            f"{'p50 ms':>9}{'p99 ms':>9}{'cpu ms':>8}{'load':>6}{'err':>5}",
        )
        for (label, stream, conc), r in rows.items():
            cores = 1 if label == "1 worker" else n
            _line(
                f"{label:<11}{'stream' if stream else 'json':>7}{conc:>5}{r['rps']:>8.0f}",
                f"{r['rps'] / cores:>9.0f}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.1f}",
                f"{r['cpu_ms']:>8.2f}{r['load']:>6.1f}{r['errors']:>5}",
            )
        _errors(rows)
