#!/usr/bin/env bash
# The admin UI end to end in a real browser (tests/ui/e2e.mjs: Debian's
# Chromium driven by Playwright, signed in at a real OpenID provider) against
# the vfps binary $VFPS_BIN (default target/debug/vfps: build it first, e.g.
# `cargo build -p vfps-server`). Bounded to 10 minutes; prints a line per check.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-ui-test-deps.sh >/dev/null
bin=${VFPS_BIN:-target/debug/vfps}
if [ ! -x "$bin" ]; then
  echo "ui-test: $bin not found; build it first (cargo build -p vfps-server)" >&2
  exit 2
fi
echo "ui-test: the admin UI in Chromium against $bin (tests/ui/e2e.mjs)"
VFPS_BIN="$bin" timeout 600 node tests/ui/e2e.mjs
