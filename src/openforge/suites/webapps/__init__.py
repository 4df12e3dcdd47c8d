"""OpenForge's bundled web apps: their server (``server.py``, run inside the sandbox beside
the browser), task directories holding ``webapp.toml`` (``loader.py``) and the bundled
``webapps`` suite."""

from __future__ import annotations

from openforge.suites.suite import Suite, TaskDirs, holds
from openforge.suites.webapps.loader import WEBAPP_FILE, WEBAPPS_SUITE, load_webapp, webapps_suite

__all__ = ["SUITE"]

SUITE = Suite(
    name=WEBAPPS_SUITE,
    formats=("webapp",),
    task_dirs=TaskDirs(claims=holds(WEBAPP_FILE), load=load_webapp),
    bundled=webapps_suite,
)
