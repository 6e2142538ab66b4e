#!/usr/bin/env bash
# Installs the Debian packages the tests and the local chaos platform need.
# Idempotent; needs root (or sudo).
set -euo pipefail

packages=(postgresql-15 postgresql-client-15 iproute2 nftables procps curl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
# The Debian package starts a default cluster; the tests make their own.
if command -v pg_lsclusters >/dev/null 2>&1; then
  "${sudo_cmd[@]}" systemctl disable --now postgresql >/dev/null 2>&1 || true
fi
