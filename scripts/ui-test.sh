#!/usr/bin/env bash
# The admin UI end to end in a real browser: first the test OpenID provider on
# its own (tests/ui/provider-check.mjs), then tests/ui/e2e.mjs (Debian's
# Chromium driven by Playwright, signed in at that provider) against the vfps
# binary $VFPS_BIN.
#
# Builds nothing: it expects the binary (default target/debug/vfps; build it
# with `cargo build -p vfps-server --bin vfps`). Installs Chromium and the npm
# packages if missing (scripts/install-ui-test-deps.sh). Each part is bounded
# (UI_TEST_TIMEOUT, default 600 s, for the browser tests); prints a line per
# check; screenshots and logs in $VFPS_UI_ARTIFACTS (/tmp/vfps-ui-artifacts).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VFPS_BIN:-target/debug/vfps}
if [ ! -x "$bin" ]; then
  echo "ui-test: no vfps binary at $bin; this script builds nothing: cargo build -p vfps-server --bin vfps (or set VFPS_BIN)" >&2
  exit 2
fi
echo "ui-test: [1/3] dependencies (Chromium, tests/ui's npm packages)"
./scripts/install-ui-test-deps.sh
echo "ui-test: [2/3] the test OpenID provider on its own"
timeout 60 node tests/ui/provider-check.mjs 2>/dev/null
echo "ui-test: [3/3] the admin UI in Chromium against $bin (tests/ui/e2e.mjs)"
status=0
VFPS_BIN="$bin" timeout --kill-after=10 "${UI_TEST_TIMEOUT:-600}" node tests/ui/e2e.mjs || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "ui-test: timed out after ${UI_TEST_TIMEOUT:-600} s" >&2
fi
exit "$status"
