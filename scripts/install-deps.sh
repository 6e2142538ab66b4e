#!/usr/bin/env bash
# Installs the Debian packages the tests and the local chaos platform need.
# Idempotent; needs root (or sudo).
set -euo pipefail

# PostgreSQL (and openssl for its test certificates) for the tests; Patroni + etcd + iproute2 + nftables for the local HA platform.
packages=(postgresql-15 postgresql-client-15 patroni etcd-server etcd-client iproute2 nftables util-linux procps curl openssl)
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
# The Debian packages may start a default cluster and an etcd; the project makes its own.
for unit in postgresql etcd patroni; do
  "${sudo_cmd[@]}" systemctl disable --now "$unit" >/dev/null 2>&1 || true
done
