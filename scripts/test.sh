#!/usr/bin/env bash
# Runs every test of the workspace: installs what the tests need, then cargo test.
# Tests start their own throwaway PostgreSQL clusters (initdb/pg_ctl, no Docker).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: the local platform tests create network namespaces and need root; run as root" >&2
  exit 2
fi
./scripts/install-deps.sh
# --include-ignored: the platform tests are ignored in a plain `cargo test` (they
# need root, Patroni and etcd); here they run.
exec cargo test --workspace --locked "$@" -- --include-ignored
