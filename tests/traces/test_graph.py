"""Named cases of the rollout graph and of masking, on in-memory calls."""

from __future__ import annotations

from openforge.store.schemas import CallStatus, RolloutStatus
from openforge.traces.graph import DriftKind, build_graph
from openforge.traces.samples import Mode, TraceOptions, plan_groups, plan_rollout
from openforge.traces.synthetic import Spec, make_calls, make_rollout


def test_parallel_subagents_and_ambiguous_parent() -> None:
    # Two calls whose prompt + output are the same ids split differently: a child of both.
    specs = [
        Spec(None, [1, 2], [3, 4]),  # c0: full 1 2 3 4
        Spec(None, [1, 2, 3], [4]),  # c1: full 1 2 3 4, does not extend c0
        Spec(0, [5], [6]),  # c2 extends c0 (and, by tokens, c1 too)
        Spec(None, [9, 9], [7]),  # c3: a subagent with its own system prompt
    ]
    calls = make_calls("r", specs, order=[3, 2, 1, 0])  # c2 arrives before its parents
    g = build_graph(calls)
    parent = {n.call.id: (n.parent.call.id if n.parent else None) for n in g.nodes}
    # c1's prompt 1 2 3 does not start with c0's full; c2's longest-prefix tie goes to lower seq.
    assert parent == {"r-c0": None, "r-c1": None, "r-c2": "r-c1", "r-c3": None}
    assert g.ambiguous == 1 and g.forks == 2
    assert [n.drift for n in g.roots] == [DriftKind.CLEAN, DriftKind.FORK, DriftKind.FORK]


def test_retries_keep_last_completed_and_distinct_outputs() -> None:
    specs = [
        Spec(None, [1, 2], [3, 4]),
        Spec(None, [], [3, 4], status=CallStatus.ENGINE_ERROR, repeat_of=0),
        Spec(None, [], [3, 4], repeat_of=0),  # same answer again: kept, c0 superseded
        Spec(None, [], [5], repeat_of=0),  # a different sample of the same prompt: kept
    ]
    g = build_graph(make_calls("r", specs))
    assert sorted(n.call.id for n in g.nodes) == ["r-c2", "r-c3"]
    assert g.retries == 2
    plan = plan_rollout(make_rollout("r"), make_calls("r", specs), TraceOptions(Mode.PER_CALL))
    assert [s.call_ids for s in plan.samples] == [["r-c2"], ["r-c3"]]


def test_teacher_calls_and_masking_reasons() -> None:
    teacher = make_calls("r", [Spec(None, [1], [2])], engine="upstream")
    plan = plan_rollout(make_rollout("r"), teacher)
    assert plan.samples == [] and plan.excluded == "no_trainable_calls"
    assert plan.counts.teacher_calls == 1
    infra = make_rollout("r", status=RolloutStatus.INFRA_ERROR)
    calls = make_calls("r", [Spec(None, [1], [2])])
    assert plan_rollout(infra, calls).counts.masked_rollouts == {"infra_error": 1}
    unscored = make_rollout("r", reward=None)
    assert plan_rollout(unscored, calls, TraceOptions(require_reward=True)).excluded == "unscored"
    aborted = make_calls("r", [Spec(None, [1], [2, 3], status=CallStatus.CLIENT_ABORTED)])
    plan = plan_rollout(make_rollout("r"), aborted)
    assert plan.counts.masked_calls == {"client_aborted": 1}


def test_group_dropped_whole_below_min_size() -> None:
    opts = TraceOptions(min_group_size=2)
    ok = plan_rollout(make_rollout("a"), make_calls("a", [Spec(None, [1], [2])]), opts)
    bad = plan_rollout(
        make_rollout("b", status=RolloutStatus.INFRA_ERROR),
        make_calls("b", [Spec(None, [1], [2])]),
        opts,
    )
    assert plan_groups([ok, bad], opts) == []
    assert ok.excluded == "group" and ok.samples == [] and ok.counts.groups_dropped == 1


def test_drift_notes_realign() -> None:
    calls = make_calls("r", [Spec(None, [1], [2]), Spec(0, [3], [4])])
    calls[1].render_info = {"drift": [{"message": 2, "position": 1}]}
    g = build_graph(calls)
    assert [n.drift for n in g.nodes] == [DriftKind.CLEAN, DriftKind.REALIGN]
    assert [(d.call_id, d.message, d.position) for d in g.drift] == [("r-c1", 2, 1)]


def test_call_without_logprobs_is_not_trained() -> None:
    calls = make_calls("r", [Spec(None, [1], [2, 3]), Spec(0, [4], [5, 6])])
    calls[1].output_logprobs = calls[1].output_logprobs[:1]  # one logprob short
    for mode in (Mode.PER_CALL, Mode.MERGED):
        plan = plan_rollout(make_rollout("r"), calls, TraceOptions(mode))
        assert plan.counts.masked_calls == {"logprobs_missing": 1}
        assert [s.call_ids for s in plan.samples] == [["r-c0"]]
