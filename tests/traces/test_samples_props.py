"""Property tests: random call trees, retries and arrival orders give exact samples."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from openforge.store.schemas import CallRecord, CallStatus
from openforge.traces.graph import build_graph
from openforge.traces.samples import Mode, TraceOptions, plan_rollout
from openforge.traces.synthetic import Spec, make_calls, make_rollout

_tok = st.integers(min_value=0, max_value=7)  # a tiny vocabulary: accidental prefixes happen


@st.composite
def rollouts(draw: st.DrawFn) -> list[CallRecord]:
    n = draw(st.integers(min_value=1, max_value=9))
    specs: list[Spec] = []
    for i in range(n):
        if i > 0 and draw(st.integers(0, 4)) == 0:
            src = draw(st.integers(0, i - 1))
            kind = draw(st.sampled_from(["same", "other", "failed"]))
            out = (
                specs[src].output
                if kind == "same"
                else draw(st.lists(_tok, min_size=1, max_size=4))
            )
            status = CallStatus.ENGINE_ERROR if kind == "failed" else CallStatus.OK
            specs.append(Spec(None, [], out, status=status, repeat_of=src))
            continue
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        obs = draw(st.lists(_tok, min_size=0 if parent is not None else 1, max_size=4))
        out = draw(st.lists(_tok, min_size=1, max_size=4))
        status = draw(
            st.sampled_from(
                [CallStatus.OK] * 6 + [CallStatus.CLIENT_ABORTED, CallStatus.ENGINE_ERROR]
            )
        )
        specs.append(Spec(parent, obs, out, status=status))
    order = draw(st.permutations(list(range(n))))
    return make_calls("r", specs, order=list(order))


def _expected_trained(calls: list[CallRecord]) -> set[str]:
    """Independently: the last ok call of each distinct (prompt, output) with some output."""
    last: dict[tuple[tuple[int, ...], tuple[int, ...]], CallRecord] = {}
    for c in sorted(calls, key=lambda c: c.seq):
        if c.status == CallStatus.OK:
            last[(tuple(c.prompt_ids), tuple(c.output_ids))] = c
    return {c.id for c in last.values() if c.output_ids}


@settings(max_examples=300, deadline=None)
@given(rollouts())
def test_merged_trains_each_sampled_token_exactly_once(calls: list[CallRecord]) -> None:
    by_id = {c.id: c for c in calls}
    plan = plan_rollout(make_rollout("r"), calls, TraceOptions(mode=Mode.MERGED))
    seen: Counter[str] = Counter()
    for s in plan.samples:
        assert len(s.response_ids) == len(s.loss_mask) == len(s.logprobs)
        assert s.loss_mask and s.loss_mask[-1] == 1
        covered = [0] * len(s.response_ids)
        ids = s.input_ids
        for call_id, a, b in s.spans:
            call = by_id[call_id]
            seen[call_id] += 1
            # Token-exact: the call's context is exactly its prompt, its tokens its output.
            assert ids[: len(s.prompt_ids) + a] == call.prompt_ids
            assert s.response_ids[a:b] == call.output_ids
            assert s.logprobs[a:b] == call.output_logprobs
            for k in range(a, b):
                covered[k] += 1
        # No observation token has mask 1; observations carry no logprob.
        assert covered == s.loss_mask
        assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.loss_mask, strict=True) if m == 0)
    assert set(seen) == _expected_trained(calls)
    assert all(v == 1 for v in seen.values())


@settings(max_examples=200, deadline=None)
@given(rollouts())
def test_per_call_and_merged_hold_the_same_sampled_tokens(calls: list[CallRecord]) -> None:
    def tokens(mode: Mode) -> Counter[tuple[str, int, int, float]]:
        plan = plan_rollout(make_rollout("r"), calls, TraceOptions(mode=mode))
        out: Counter[tuple[str, int, int, float]] = Counter()
        for s in plan.samples:
            for call_id, a, b in s.spans:
                for k in range(a, b):
                    out[(call_id, k - a, s.response_ids[k], s.logprobs[k])] += 1
        return out

    per_call, merged = tokens(Mode.PER_CALL), tokens(Mode.MERGED)
    assert per_call == merged
    assert sum(per_call.values()) == sum(
        len(c.output_ids) for c in calls if c.id in _expected_trained(calls)
    )


@settings(max_examples=200, deadline=None)
@given(rollouts(), st.randoms(use_true_random=False))
def test_graph_is_independent_of_arrival_order(calls: list[CallRecord], rnd: object) -> None:
    def shape(cs: list[CallRecord]) -> set[tuple[str, str | None]]:
        g = build_graph(cs)
        return {(n.call.id, n.parent.call.id if n.parent else None) for n in g.nodes}

    shuffled = list(calls)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert shape(shuffled) == shape(calls)
