#!/usr/bin/env bash
# The local HA chaos run: 3 vfps replicas and a 3-instance Patroni cluster in
# network namespaces, every scenario under continuous load, gated on P1-P4.
# Needs root. Durations come from DURATION_* (defaults: the full suite, ~17 min of
# load); `--ci` selects the trimmed set used by .ci/run (~2 min of load).
# The run directory (report.html, timelines, logs) is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "chaos-local: needs root (network namespaces, nftables); run it with sudo" >&2
  exit 2
fi
profile=${1:-full}
./scripts/install-deps.sh
if [ "$profile" = "--ci" ]; then
  cargo build --locked --bins -p vfps-server -p vfps-chaos
  bin=target/debug
  export DURATION_BASELINE=${DURATION_BASELINE:-8} DURATION_VFPS_POD_KILL=${DURATION_VFPS_POD_KILL:-14} \
    POD_KILL_INTERVAL_SECONDS=${POD_KILL_INTERVAL_SECONDS:-7} DURATION_DB_PRIMARY_KILL=${DURATION_DB_PRIMARY_KILL:-32} \
    DURATION_DB_NETWORK_PARTITION=${DURATION_DB_NETWORK_PARTITION:-16} PARTITION_BURST_SECONDS=${PARTITION_BURST_SECONDS:-6} \
    PARTITION_EVERY_SECONDS=${PARTITION_EVERY_SECONDS:-12} DURATION_ROLLOUT=${DURATION_ROLLOUT:-16} \
    MIN_READY_SECONDS=${MIN_READY_SECONDS:-2} DURATION_DRAIN=${DURATION_DRAIN:-20} DRAIN_HOLD_SECONDS=${DRAIN_HOLD_SECONDS:-5} \
    LOAD_MARGIN_SECONDS=${LOAD_MARGIN_SECONDS:-6} RESILIENCE_SETTLE_SECONDS=${RESILIENCE_SETTLE_SECONDS:-5} \
    RESILIENCE_MAX_UNAVAILABLE_SECONDS=${RESILIENCE_MAX_UNAVAILABLE_SECONDS:-30}
else
  cargo build --locked --release --bins -p vfps-server -p vfps-chaos
  bin=target/release
fi
export RESILIENCE_OUTPUT_DIR=${RESILIENCE_OUTPUT_DIR:-runs/local-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESILIENCE_OUTPUT_DIR"
status=0
# The generator's and driver's own output is part of the run's evidence.
"$bin/vfps-chaos" local all 2>&1 | tee "$RESILIENCE_OUTPUT_DIR/vfps-chaos.log" || status=${PIPESTATUS[0]}
# down is idempotent and runs whatever happened.
"$bin/vfps-chaos" local down || true
echo "chaos-local: run directory $RESILIENCE_OUTPUT_DIR (exit $status)"
exit "$status"
