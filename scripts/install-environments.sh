#!/usr/bin/env bash
# The Python that runs beside a harness inside the sandboxes (src/openforge/environments):
# the MCP bridge (the official `mcp` SDK) and published suites' mock services (ClawEval's
# FastAPI servers under mock_services/). A venv under /opt/openforge, built on the system
# Python, because the sandboxes see /usr and /opt but not a pyenv under /root or the repo.
# Skipped when the pins are already there; a failed install leaves no half-built venv.
set -euo pipefail
PREFIX=${OPENFORGE_PREFIX:-/opt/openforge}
ENV_DIR="$PREFIX/environments"
SYS_PY=/usr/bin/python3
PINS="mcp==1.30.0 fastapi==0.165.0 uvicorn==0.54.0 httpx==0.28.1 pydantic==2.14.4 pyyaml==6.0.4"
env_ok() {
  [ -x "$ENV_DIR/bin/python" ] && [ "$("$ENV_DIR/bin/python" -c 'from importlib.metadata import version as v
print(" ".join(f"{p}=={v(p)}" for p in ("mcp", "fastapi", "uvicorn", "httpx", "pydantic", "pyyaml")))' 2>/dev/null)" = "$PINS" ]
}
if ! env_ok; then
  rm -rf "$ENV_DIR"
  if ! { "$SYS_PY" -m venv "$ENV_DIR" &&
         "$ENV_DIR/bin/pip" install -q --disable-pip-version-check $PINS; }; then
    rm -rf "$ENV_DIR"
    echo "install-environments: the sandbox Python environment failed to install" >&2
    exit 1
  fi
fi
