#!/usr/bin/env bash
# Installs what the browser tests, the UI benchmark and the chaos harness's
# browser probe need: Debian's Chromium, its headless shell (the probe's
# browser) and ChromeDriver, and tests/ui's npm packages at the versions
# package-lock.json pins (playwright-core: no browser download, Debian's
# Chromium is used; oidc-provider; axe-core).
#
# Idempotent: apt runs only for a package missing, `npm ci` only when the lock
# file changed since the last install (or node_modules is incomplete). Needs
# root (or sudo) for apt; npm prefers its cache and runs no install scripts.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
missing=()
for p in chromium chromium-headless-shell chromium-driver; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (the machine's own Node.js).
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-ui-test-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "install-ui-test-deps: node $(node --version) is too old: playwright-core needs node 20 or later" >&2
  exit 1
fi

stamp=tests/ui/node_modules/.package-lock.json.source
complete=true
for m in playwright-core oidc-provider axe-core; do
  [ -f "tests/ui/node_modules/$m/package.json" ] || complete=false
done
if ! $complete || ! cmp -s tests/ui/package-lock.json "$stamp" 2>/dev/null; then
  echo "install-ui-test-deps: npm ci in tests/ui"
  (cd tests/ui && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error)
  cp tests/ui/package-lock.json "$stamp"
fi
# Debian's wrapper script prints a harmless complaint on stderr on some machines.
echo "install-ui-test-deps: $(/usr/bin/chromium --version 2>/dev/null), headless shell $(/usr/bin/chromium-headless-shell --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -1), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2), node $(node --version)"
