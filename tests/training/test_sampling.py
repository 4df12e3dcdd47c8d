"""Which tasks a step draws: the plain seeded epochs, resting tasks, the checkpointed state."""

from __future__ import annotations

from pathlib import Path

from openforge.tasks.model import Task
from openforge.training.loop import tasks_for_step
from openforge.training.sampling import TaskSampler, has_spread


def _tasks(n: int) -> list[Task]:
    return [Task(id=f"t{i}", instruction="x", path=Path(".")) for i in range(n)]


def test_plain_draws_cover_each_epoch_once_and_match_tasks_for_step() -> None:
    tasks = _tasks(8)
    sampler = TaskSampler(tasks, seed=3)
    drawn = [t.id for step in range(8) for t in sampler.draw(2, step)]
    # 16 draws = two epochs: every task twice, each epoch a permutation
    assert sorted(drawn[:8]) == sorted(drawn[8:]) == sorted(t.id for t in tasks)
    assert drawn[:8] != [t.id for t in tasks] and drawn[:8] != drawn[8:]  # shuffled per epoch
    # the loop's fixed schedule is the same order (a step never repeats a task in an epoch)
    fixed = [t.id for step in range(3) for t in tasks_for_step(tasks, step, 2, seed=3)]
    assert fixed == drawn[:6]
    assert [t.id for t in tasks_for_step(tasks, 1, 2, seed=4)] != fixed[2:4]  # seeded


def test_a_uniform_group_rests_its_task_for_rest_steps() -> None:
    tasks = _tasks(4)
    sampler = TaskSampler(tasks, seed=0, rest_steps=2)
    first = sampler.draw(2, step=0)
    kept = sampler.observe([(first[0].id, [1.0, 1.0, 1.0]), (first[1].id, [0.0, 1.0])], step=0)
    assert kept == 1
    assert sampler.is_resting(first[0].id, 1) and sampler.is_resting(first[0].id, 2)
    assert not sampler.is_resting(first[0].id, 3)
    assert sampler.resting_now(1) == 1
    for step in (1, 2):
        assert first[0].id not in {t.id for t in sampler.draw(3, step)}
    # a group with a spread ends the rest at once
    sampler.observe([(first[0].id, [0.0, 1.0])], step=2)
    assert not sampler.is_resting(first[0].id, 2)


def test_rest_steps_zero_never_rests_and_everything_resting_still_draws() -> None:
    tasks = _tasks(3)
    plain = TaskSampler(tasks, seed=1)
    plain.observe([(t.id, [0.0, 0.0]) for t in tasks], step=0)
    assert plain.resting == {}
    sampler = TaskSampler(tasks, seed=1, rest_steps=5)
    sampler.observe([(t.id, [0.0, 0.0]) for t in tasks], step=0)
    got = sampler.draw(2, step=1)
    assert len({t.id for t in got}) == 2  # a step never starves
    assert sampler.draw(10, step=1) and len(sampler.draw(10, step=1)) == 3  # at most n
    assert TaskSampler([], seed=0).draw(2, 0) == []


def test_state_round_trips_through_a_checkpoint() -> None:
    tasks = _tasks(5)
    a = TaskSampler(tasks, seed=2, rest_steps=1)
    a.draw(3, 0)
    a.observe([("t1", [1.0, 1.0])], step=0)
    b = TaskSampler(tasks, seed=2, rest_steps=1)
    b.load(a.state())
    assert [t.id for t in b.draw(2, 1)] == [t.id for t in a.draw(2, 1)]
    b.load({"cursor": "bad", "resting": []})  # a damaged record starts over, not crashes
    assert (b.cursor, b.resting) == (0, {})
    b.load({"resting": {"t1": "x"}, "skills_resting": {"s": None}})
    assert (b.resting, b.skills_resting) == ({}, {})
    # the skills' runs and rests come back too
    skill_of = {t.id: "s" for t in tasks}
    c = TaskSampler(tasks, seed=2, rest_steps=1, skill_of=skill_of, skill_rest_after=2)
    c.observe([("t0", [0.0, 0.0]), ("t1", [1.0, 1.0])], step=0)
    d = TaskSampler(tasks, seed=2, rest_steps=1, skill_of=skill_of, skill_rest_after=2)
    d.load(c.state())
    assert d.is_resting("t4", 1) and d.uniform_run == {"s": 2}


def test_a_skill_whose_groups_stay_uniform_rests_as_a_whole() -> None:
    tasks = _tasks(6)  # skill "a": t0, t1, t2; skill "b": t3, t4, t5
    skill_of = {t.id: ("a" if i < 3 else "b") for i, t in enumerate(tasks)}
    sampler = TaskSampler(tasks, seed=0, rest_steps=2, skill_of=skill_of, skill_rest_after=2)
    sampler.observe([("t0", [0.0, 0.0])], step=0)  # one uniform group: only its task rests
    assert sampler.is_resting("t0", 1) and not sampler.is_resting("t1", 1)
    assert sampler.skills_resting_now(1) == 0
    sampler.observe([("t1", [0.0, 0.0]), ("t3", [0.0, 1.0])], step=1)  # a's second in a row
    for t in ("t0", "t1", "t2"):
        assert sampler.is_resting(t, 2) and sampler.is_resting(t, 3)
    assert not sampler.is_resting("t2", 4)  # the skill's rest ends after rest_steps
    assert not any(sampler.is_resting(t, 2) for t in ("t3", "t4", "t5"))
    assert sampler.resting_now(2) == 3 and sampler.skills_resting_now(2) == 1
    assert {t.id for t in sampler.draw(3, step=2)} == {"t3", "t4", "t5"}
    # back from its rest, one more uniform group rests it again; a spread ends that
    sampler.observe([("t2", [1.0, 1.0])], step=4)
    assert sampler.is_resting("t0", 5)
    sampler.observe([("t0", [0.0, 1.0])], step=5)
    assert not sampler.is_resting("t1", 5) and sampler.skills_resting_now(5) == 0
    sampler.observe([("t2", [1.0, 1.0])], step=6)  # the run started over at the spread
    assert not sampler.is_resting("t1", 7)


def test_skill_runs_are_broken_by_a_spread_and_off_by_default() -> None:
    tasks = _tasks(4)
    skill_of = {t.id: "s" for t in tasks}
    sampler = TaskSampler(tasks, seed=0, rest_steps=1, skill_of=skill_of, skill_rest_after=2)
    sampler.observe([("t0", [0.0, 0.0]), ("t1", [0.0, 1.0]), ("t2", [0.0, 0.0])], step=0)
    assert not sampler.is_resting("t3", 1)  # uniform, spread, uniform: no two in a row
    plain = TaskSampler(tasks, seed=0, rest_steps=1, skill_of=skill_of)
    plain.observe([(t.id, [0.0, 0.0]) for t in tasks[:3]], step=0)
    assert not plain.is_resting("t3", 1) and plain.skills_resting == {}


def test_has_spread() -> None:
    assert has_spread([0.0, 1.0]) and has_spread([0.5, 0.25, 0.5])
    assert not has_spread([1.0, 1.0]) and not has_spread([0.3]) and not has_spread([])
