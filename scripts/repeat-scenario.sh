#!/usr/bin/env bash
# Repeats scenarios on a fresh local topology N times (default: the paused
# primary, 20 times) and prints the tally: per run and scenario the failovers,
# the longest outage, the acknowledged writes lost (P2 changed, P3 not
# resolving) and each failover's seconds from the fault to the first
# acknowledged write through vfps (the failover breakdown's); then the totals,
# per scenario each failover step's median and maximum over every failover,
# and whether the scenario met its target (scripts/repeat-tally.py, which can
# tally a kept series again). Exits non-zero if a run failed or a target was
# missed.
#   sudo ./scripts/repeat-scenario.sh [scenario[,scenario...]] [runs]
# Each run: baseline 20 s, then each scenario's window (DURATION_<SCENARIO>,
# 40 s by default) under the README main job's load (scripts/chaos-local.sh
# full); the run directories are kept under runs/repeat-<first scenario>-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=${1:-db-primary-pause}
runs=${2:-20}
if [ "$(id -u)" -ne 0 ]; then
  echo "repeat-scenario: needs root (network namespaces, nftables); run it with sudo" >&2
  exit 2
fi
case "$runs" in '' | *[!0-9]*) echo "repeat-scenario: runs must be a whole number, got '$runs'" >&2; exit 2 ;; esac
./scripts/install-deps.sh >/dev/null
cargo build --locked --release --bins -p vfps-server -p vfps-chaos
IFS=, read -r -a listed <<<"$scenarios"
for scenario in "${listed[@]}"; do
  window_var="DURATION_$(echo "$scenario" | tr 'a-z-' 'A-Z_')"
  export "$window_var"="${!window_var:-40}"
done
# A 20 s baseline: load before the fault. The guards' operations (a
# multi-pseudonym create, its count-0 read and an erasure) are scheduled first
# by the workload, so any run this script makes can meet them.
export SCENARIOS="baseline,$scenarios" DURATION_BASELINE=${DURATION_BASELINE:-20}
export LOAD_MARGIN_SECONDS=${LOAD_MARGIN_SECONDS:-5} RESILIENCE_SETTLE_SECONDS=${RESILIENCE_SETTLE_SECONDS:-5}
out=runs/repeat-${listed[0]}-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
tally=$out/tally.txt
printf '%-4s %-6s %-22s %-10s %-14s %-10s %-10s %-20s %s\n' run result scenario failovers longest-outage P2-changed P3-lost seed fault-to-write-s | tee "$tally"
failed=0
for i in $(seq 1 "$runs"); do
  dir=$out/run-$i
  mkdir -p "$dir"
  status=0
  # The main job's own entry point: its load (the API mix with the MII side,
  # CSV jobs, the browser probe, WAL archiving), only the scenarios differ.
  RESILIENCE_OUTPUT_DIR=$dir ./scripts/chaos-local.sh full >"$dir/chaos-local.log" 2>&1 || status=$?
  lines=$(python3 scripts/repeat-tally.py row "$dir" "$scenarios" "$status" "$i")
  echo "$lines" | tee -a "$tally"
  case "$lines" in *PASS*) ;; *) failed=$((failed + 1)) ;; esac
done
tallied=0
python3 scripts/repeat-tally.py total "$out" | tee "$out/totals.txt" || tallied=$?
echo "repeat-scenario: run directories under $out"
[ "$failed" -eq 0 ] && [ "$tallied" -eq 0 ]
