"""Opening a PostgreSQL store whose host never answers: a bounded wait (libpq's
``connect_timeout``, ours by default) and an error naming the URL, its password masked,
and the option; never the operating system's TCP timeout or a stack trace."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from openforge.store.base import StoreError
from openforge.store.location import open_store
from openforge.store.pgschema import CONNECT_TIMEOUT_S, with_timeout

OPENFORGE = Path(sys.executable).parent / "openforge"


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose listening socket never accepts and whose backlog is full: the kernel
    drops every further SYN, as a host behind a silent firewall does."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):  # the backlog holds one or two whatever the argument: fill it
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    yield port
    for c in fillers:
        c.close()
    server.close()


def test_a_silent_host_is_an_error_naming_the_url_and_the_option(blackhole: int) -> None:
    url = f"postgresql://me:s3cret@127.0.0.1:{blackhole}/calls?connect_timeout=1"
    with pytest.raises(StoreError) as err:
        open_store(url)
    text = str(err.value)
    assert f"cannot connect to the store at postgresql://me@127.0.0.1:{blackhole}/calls" in text
    assert "no answer within 1 s" in text and "connect_timeout=SECONDS" in text
    assert "s3cret" not in text


def test_the_default_timeout_applies_unless_the_url_sets_one() -> None:
    assert f"connect_timeout={CONNECT_TIMEOUT_S}" in with_timeout("postgresql://me@db.example/c")
    url = "postgresql://me@db.example/calls?connect_timeout=3"
    assert with_timeout(url) == url


def test_traces_on_a_silent_host_exits_with_the_error(blackhole: int) -> None:
    url = f"postgresql://me:s3cret@127.0.0.1:{blackhole}/calls?connect_timeout=1"
    out = subprocess.run(
        [str(OPENFORGE), "traces", "stats", "--store", url],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"postgresql://me@127.0.0.1:{blackhole}/calls" in text and "connect_timeout" in text
    assert "Traceback" not in text and "s3cret" not in text
