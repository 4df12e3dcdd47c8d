"""The curriculum on synthetic pass-rate histories: which buckets it measures, how it
weighs them, that harder levels open as easier ones are mastered, that the draw follows the
weights and skips resting tasks, and that its state survives a checkpoint."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from openforge.tasks.model import Task
from openforge.training.curriculum import Curriculum, curriculum_skills
from openforge.training.sampling import TaskSampler


def _suite(levels: tuple[int, ...] = (0, 1), per: int = 3) -> list[Task]:
    out = []
    for skill in ("copy", "count"):
        for level in levels:
            tags = ("drill", skill) + ((f"level-{level}",) if level else ())
            for n in range(per):
                out.append(
                    Task(id=f"{skill}-L{level}-{n}", instruction="x", path=Path("."), tags=tags)
                )
    return out


def _curriculum(
    tasks: list[Task], low: float = 0.2, high: float = 0.8, explore: float = 0.1
) -> Curriculum:
    return Curriculum(tasks, curriculum_skills(tasks), seed=1, low=low, high=high, explore=explore)


def _feed(cur: Curriculum, task_id: str, passes: int, of: int = 4) -> None:
    cur.observe(task_id, [1.0] * passes + [0.0] * (of - passes))


def test_skills_set_the_level_aside_even_for_one_family() -> None:
    tasks = _suite()
    skill = curriculum_skills(tasks)
    assert skill["copy-L1-0"] == "copy" and skill["count-L0-2"] == "count"
    only = [t for t in tasks if t.id.startswith("copy")]
    assert set(curriculum_skills(only).values()) == {"copy"}


def test_weights_follow_the_band_and_harder_levels_open_when_mastered() -> None:
    cur = _curriculum(_suite())
    # nothing measured: level 0 weighs 1, level 1 is locked
    assert cur.weights() == {"copy@0": 1.0, "copy@1": 0.0, "count@0": 1.0, "count@1": 0.0}
    _feed(cur, "copy-L0-0", 4)  # copy@0 passes every time: mastered, level 1 opens
    _feed(cur, "count-L0-1", 0)  # count@0 never passes: too hard, level 1 stays locked
    assert cur.rates() == {"copy@0": 1.0, "count@0": 0.0}
    assert cur.weights() == {"copy@0": 0.1, "copy@1": 1.0, "count@0": 0.1, "count@1": 0.0}
    _feed(cur, "count-L0-2", 2)  # the rate is over the last `window` groups: (0 + .5) / 2
    assert cur.rate("count@0") == 0.25 and cur.weight("count@0") == 1.0
    _feed(cur, "copy-L1-0", 3)  # in band: 0.75
    assert cur.weight("copy@1") == 1.0
    # the window forgets: four more mastered groups after a failing one
    _feed(cur, "count-L0-0", 0)
    for _ in range(4):
        _feed(cur, "count-L0-0", 4)
    assert cur.rate("count@0") == 1.0 and cur.weight("count@1") == 1.0
    assert _curriculum(_suite(), low=0.0, high=0.5).weight("copy@0") == 1.0


def test_the_draw_follows_the_weights_and_skips_resting_tasks() -> None:
    tasks = _suite(levels=(0,), per=50)
    cur = _curriculum(tasks, explore=0.25)
    _feed(cur, "copy-L0-0", 4)  # out of band: weight 0.25 against count's 1
    counts: Counter[str] = Counter()
    for i in range(400):
        for task in cur.draw(1, i, lambda t: True):
            counts[cur.bucket_of(task.id) or "?"] += 1
    assert 0.14 < counts["copy@0"] / 400 < 0.26  # 0.25 / 1.25 = 0.2
    # distinct tasks; only usable ones while there are any, others rather than starving
    drawn = cur.draw(10, 0, lambda t: not t.id.startswith("count"))
    assert len({t.id for t in drawn}) == 10 and all(t.id.startswith("copy") for t in drawn)
    few = _suite(levels=(0,), per=2)
    assert len(_curriculum(few).draw(4, 0, lambda t: t.id == "copy-L0-0")) == 4


def test_the_sampler_feeds_the_curriculum_and_checkpoints_it() -> None:
    tasks = _suite()
    sampler = TaskSampler(tasks, seed=1, curriculum=_curriculum(tasks))
    first = sampler.draw(2, step=0)
    assert all("-L0-" in t.id for t in first)  # level 1 is locked at the start
    sampler.observe([(t.id, [1.0, 1.0]) for t in first], step=0)
    assert sampler.curriculum is not None and sampler.curriculum.rates()
    state = sampler.state()
    again = TaskSampler(tasks, seed=1, curriculum=_curriculum(tasks))
    again.load(state)
    assert again.curriculum is not None
    assert again.curriculum.rates() == sampler.curriculum.rates()
    assert [t.id for t in again.draw(3, 1)] == [t.id for t in sampler.draw(3, 1)]
    damaged = TaskSampler(tasks, seed=1, curriculum=_curriculum(tasks))
    damaged.load({"curriculum": {"history": {"copy@0": ["x"]}}})
    assert damaged.curriculum is not None and damaged.curriculum.rates() == {}


def test_with_explore_0_a_step_still_gets_its_tasks() -> None:
    tasks = _suite(levels=(0,), per=2)
    cur = _curriculum(tasks, explore=0.0)
    _feed(cur, "copy-L0-0", 4)  # mastered: weight 0
    _feed(cur, "count-L0-0", 2)  # in band: weight 1, two tasks
    drawn = cur.draw(3, 0, lambda t: True)
    assert len(drawn) == 3
    assert sum(1 for t in drawn if t.id.startswith("count")) == 2
