#!/usr/bin/env bash
# The main job.
#   ./scripts/run.sh         the full local HA chaos run (needs root): vfps on a
#                            Patroni cluster in network namespaces, every scenario
#                            under load, report in runs/local-*/report.html
#   ./scripts/run.sh serve   vfps alone on its embedded default (SQLite ./vfps.sqlite):
#                            gRPC :8081, REST/FHIR :8080, metrics :8082
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "serve" ]; then
  shift
  exec cargo run --release --locked -p vfps-server --bin vfps -- serve "$@"
fi
exec ./scripts/chaos-local.sh "$@"
