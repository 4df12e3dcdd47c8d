#!/usr/bin/env bash
# Install the pinned harness versions globally (the sandboxes see /usr read-only).
set -euo pipefail
npm install -g --no-audit --no-fund --loglevel=error \
  @anthropic-ai/claude-code@2.1.197 \
  @openai/codex@0.171.0
