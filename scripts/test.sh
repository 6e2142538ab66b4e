#!/usr/bin/env bash
# Runs every test of the workspace: installs what the tests need, then cargo test.
# Tests start their own throwaway PostgreSQL clusters (initdb/pg_ctl, no Docker).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
exec cargo test --workspace --locked "$@"
