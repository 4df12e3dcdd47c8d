"""Probing harnesses end to end: a scripted gateway, the real orchestrator, one task.

Above ``harnesses``, ``gateway`` and ``rollouts`` (it composes them, as an operator would),
so none of those imports it. Used by ``openforge harness fingerprint|check`` and the tests.
"""
