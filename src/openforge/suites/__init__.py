"""Suites: the benchmarks OpenForge loads, and finding every task under a path."""

from openforge.suites.loading import TaskSet, builtin_suite, load_task_dir, load_tasks

__all__ = ["TaskSet", "builtin_suite", "load_task_dir", "load_tasks"]
