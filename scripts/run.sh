#!/usr/bin/env bash
# Builds and starts vfps on its embedded default (an SQLite file, ./vfps.sqlite):
# gRPC on :8081, REST and FHIR on :8080, metrics on :8082. Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release --locked -p vfps-server --bin vfps -- serve "$@"
