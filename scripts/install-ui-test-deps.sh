#!/usr/bin/env bash
# Installs what the browser tests, the UI benchmark and the chaos harness's
# browser probe need: Debian's Chromium and ChromeDriver, and tests/ui's npm
# packages at the versions package-lock.json pins (Playwright's core, no browser
# download; oidc-provider; axe-core). Idempotent; needs root (or sudo) for apt.
set -euo pipefail
cd "$(dirname "$0")/.."
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
missing=()
for p in chromium chromium-driver nodejs npm; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (a machine's own Node.js).
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}")
  missing=("${missing[@]/npm/}")
fi
read -r -a missing <<<"${missing[*]}"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-ui-test-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
stamp=tests/ui/node_modules/.package-lock.json
if ! cmp -s tests/ui/package-lock.json "$stamp.source" 2>/dev/null || [ ! -d tests/ui/node_modules/playwright-core ]; then
  echo "install-ui-test-deps: npm ci in tests/ui"
  (cd tests/ui && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  cp tests/ui/package-lock.json "$stamp.source"
fi
echo "install-ui-test-deps: $(/usr/bin/chromium --version 2>/dev/null), node $(node --version)"
