"""The quickstart's task selection: what the warm-up teaches, what GRPO trains, what is held out."""

from __future__ import annotations

from openforge.suites import load_tasks
from openforge.suites.drills.generate import DRILL_FAMILIES
from openforge.training.quickstart import QUICKSTART_SUITE, quickstart_config, teacher_tasks


def test_quickstart_holds_out_the_test_instances_and_teaches_a_few_per_family() -> None:
    cfg = quickstart_config("runs/unused", steps=1)
    train = load_tasks(cfg.tasks, split=cfg.train_split).tasks
    held_out = load_tasks(cfg.tasks, split=cfg.eval_split).tasks
    assert cfg.tasks == QUICKSTART_SUITE and not cfg.task_ids
    assert held_out and {t.id for t in train}.isdisjoint(t.id for t in held_out)
    taught = teacher_tasks(train)
    families = sorted({t.id.removeprefix("drill-").rsplit("-", 2)[0] for t in taught})
    assert families == sorted(DRILL_FAMILIES)
    assert len(taught) == 2 * len(DRILL_FAMILIES) < len(train)
    assert all(t.split == "train" for t in taught)
    assert len(teacher_tasks(train, per_family=1)) == len(DRILL_FAMILIES)
