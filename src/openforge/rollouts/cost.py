"""What a run cost: sandbox-seconds, engine tokens by call role, trainer tokens, wall time
per phase, and money when the user gives prices.

Every rollout's result carries its engine token counts by role (``RolloutResult.usage``,
read from the gateway's admin API when the rollout is finished), and its sandbox time
(``timings["total"]``: create to teardown, over every attempt). A :class:`RunCost` adds up
results and whatever else the caller measured (trainer tokens, phase wall times); with
:class:`Prices` it is priced. It goes into a run's ``summary.json`` and report.

Roles (DESIGN.md, "Roles of a call"): ``policy``, ``teacher``, ``judge``, ``user``. A call
counts under the role the gateway recorded for it; a gateway that records none is read as
``teacher`` for its upstream engine and ``policy`` otherwise.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from openforge.rollouts.config import RolloutResult

__all__ = ["Prices", "RunCost", "TokenCount", "cost_html", "usage_from_calls"]


@dataclass(slots=True)
class TokenCount:
    """Engine tokens of one role: prompt tokens the engine read, output tokens it sampled."""

    calls: int = 0
    prompt: int = 0
    output: int = 0

    def add(self, other: TokenCount) -> None:
        """Add ``other``'s counts to these."""
        self.calls += other.calls
        self.prompt += other.prompt
        self.output += other.output


def _role(call: Mapping[str, Any]) -> str:
    role = call.get("role")
    if isinstance(role, str) and role:
        return role
    return "teacher" if call.get("engine") == "upstream" else "policy"


def usage_from_calls(calls: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Token counts by role of a rollout's calls as ``GET /admin/rollouts/<id>`` lists them
    (``prompt_tokens``, ``output_tokens``, ``engine``, and ``role`` where recorded)."""
    out: dict[str, TokenCount] = {}
    for call in calls:
        count = out.setdefault(_role(call), TokenCount())
        count.add(
            TokenCount(1, int(call.get("prompt_tokens") or 0), int(call.get("output_tokens") or 0))
        )
    return {role: asdict(c) for role, c in out.items()}


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices in the user's currency; a price left out is not charged."""

    input_per_mtok: float | None = None  # per million engine prompt tokens
    output_per_mtok: float | None = None  # per million engine output tokens
    sandbox_per_hour: float | None = None  # per sandbox-hour
    train_per_mtok: float | None = None  # per million tokens through the trainer

    def given(self) -> bool:
        """True when at least one price is set."""
        return any(v is not None for v in asdict(self).values())


@dataclass(slots=True)
class RunCost:
    """Totals of one run (a rollout or eval run, or a training run's every phase)."""

    rollouts: int = 0
    sandbox_s: float = 0.0
    tokens: dict[str, TokenCount] = field(default_factory=dict)  # by call role
    trainer_tokens: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)  # wall seconds per phase
    wall_s: float = 0.0

    def add_results(self, results: Iterable[RolloutResult], role: str | None = None) -> None:
        """Add the results' sandbox time and token counts; ``role`` relabels every call
        (the scripted engine playing a teacher records its calls as a policy's)."""
        for r in results:
            self.rollouts += 1
            self.sandbox_s += float(r.timings.get("total", 0.0))
            for call_role, counts in (r.usage or {}).items():
                self.tokens.setdefault(role or call_role, TokenCount()).add(TokenCount(**counts))

    def add_phase(self, phase: str, seconds: float) -> None:
        """Add ``seconds`` of wall time to ``phase``."""
        self.phases_s[phase] = self.phases_s.get(phase, 0.0) + seconds

    def money(self, prices: Prices) -> dict[str, float]:
        """The cost of each priced item and the ``total`` (empty without prices)."""
        out: dict[str, float] = {}
        prompt = sum(c.prompt for c in self.tokens.values())
        output = sum(c.output for c in self.tokens.values())
        if prices.input_per_mtok is not None:
            out["engine_input"] = prompt / 1e6 * prices.input_per_mtok
        if prices.output_per_mtok is not None:
            out["engine_output"] = output / 1e6 * prices.output_per_mtok
        if prices.sandbox_per_hour is not None:
            out["sandboxes"] = self.sandbox_s / 3600 * prices.sandbox_per_hour
        if prices.train_per_mtok is not None:
            out["trainer"] = self.trainer_tokens / 1e6 * prices.train_per_mtok
        if out:
            out["total"] = sum(out.values())
        return out

    def as_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        """JSON-able totals, with ``prices`` and ``money`` when prices are given."""
        out: dict[str, Any] = {
            "rollouts": self.rollouts,
            "sandbox_s": round(self.sandbox_s, 3),
            "engine_tokens": {role: asdict(c) for role, c in sorted(self.tokens.items())},
            "trainer_tokens": self.trainer_tokens,
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
            "wall_s": round(self.wall_s, 3),
        }
        if prices is not None and prices.given():
            out["prices"] = {k: v for k, v in asdict(prices).items() if v is not None}
            out["money"] = {k: round(v, 6) for k, v in self.money(prices).items()}
        return out


def cost_html(cost: RunCost, prices: Prices | None = None) -> str:
    """The cost as HTML tables (for a run's report)."""
    d = cost.as_dict(prices)
    rows = [
        ("rollouts", str(d["rollouts"])),
        ("sandbox time", f"{cost.sandbox_s:.0f} s ({cost.sandbox_s / 3600:.3f} sandbox-h)"),
        ("trainer tokens", f"{cost.trainer_tokens:,}"),
        ("wall time", f"{cost.wall_s:.0f} s"),
    ]
    rows += [(f"wall: {p}", f"{s:.0f} s") for p, s in cost.phases_s.items()]
    head = "".join(
        f"<tr><td style=text-align:left>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    tokens = "".join(
        f"<tr><td style=text-align:left>{html.escape(role)}</td><td>{c.calls:,}</td>"
        f"<td>{c.prompt:,}</td><td>{c.output:,}</td></tr>"
        for role, c in sorted(cost.tokens.items())
    )
    out = (
        f"<table>{head}</table><h3>Engine tokens by role</h3><table><tr><th>role</th>"
        f"<th>calls</th><th>prompt</th><th>output</th></tr>{tokens}</table>"
    )
    money = d.get("money")
    if money:
        cells = "".join(
            f"<tr><td style=text-align:left>{html.escape(k)}</td><td>{v:.4f}</td></tr>"
            for k, v in money.items()
        )
        out += f"<h3>Price</h3><table>{cells}</table>"
    return out
