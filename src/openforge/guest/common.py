"""What every program run inside a sandbox shares (standard library only, Python 3.8+).

It is shipped inside each program's bundle (:func:`openforge.guest.bundle`) and imported
as ``openforge.guest.common`` there and on the host alike, so host code and guests name the
sandbox's places with the same constants.
"""

from __future__ import annotations

# $HOME in every sandbox (the local backend's bind, the container's user home): where harness
# adapters and environments put their files.
SANDBOX_HOME = "/home/sandbox"
# The task's working directory inside a sandbox unless the task names another.
SANDBOX_WORKDIR = "/workspace"
# OpenForge's own files under $HOME (agents, env files) and the GUI environment's under that.
STATE_DIR = ".openforge"
GUI_DIR = f"{STATE_DIR}/gui"
