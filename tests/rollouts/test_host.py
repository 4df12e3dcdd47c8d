"""A timeout on an overloaded host is told apart from an agent that ran long; too much
concurrency for the machine is warned about."""

from __future__ import annotations

from openforge.progress import concurrency_warning, cores
from openforge.rollouts.config import RolloutResult
from openforge.rollouts.host import mark_overload


def _timeout(**host: float) -> RolloutResult:
    res = RolloutResult("t", 0, "timeout", 0.0, error="harness ran past the task timeout (120s)")
    res.timings = {"agent": 120.0}
    res.host = {"cores": 2.0, "load_start": 1.0, "load_end": 1.0, "engine_queue_s": 0.0, **host}
    return res


def test_timeout_on_an_overloaded_host_says_so_and_stays_a_timeout() -> None:
    loaded = _timeout(load_end=7.9)
    mark_overload(loaded)
    assert loaded.host["overloaded"] == 1.0
    assert loaded.status == "timeout" and loaded.reward == 0.0  # never masked on its word
    assert "host was overloaded (load 7.9 on 2 cores" in str(loaded.error)
    assert "lower --concurrency" in str(loaded.error)
    queued = _timeout(engine_queue_s=60.0)  # half its time waiting for the engine
    mark_overload(queued)
    assert queued.host["overloaded"] == 1.0 and "60 s waiting for the engine" in str(queued.error)


def test_agent_that_ran_long_on_a_calm_host_is_not_marked() -> None:
    calm = _timeout()
    mark_overload(calm)
    assert calm.host["overloaded"] == 0.0
    assert calm.error == "harness ran past the task timeout (120s)"


def test_concurrency_above_the_cores_is_warned_about() -> None:
    assert concurrency_warning(2, 2) is None
    warning = concurrency_warning(8, 2)
    assert warning is not None and "8 exceeds this machine's 2 cores" in warning
    assert "--concurrency 2 fits" in warning
    assert cores() >= 1
