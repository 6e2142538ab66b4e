#!/usr/bin/env bash
# Repeats scenarios on a fresh local topology N times (default: the paused
# primary, 20 times) and prints the tally: per run and scenario the failovers,
# the longest outage, the acknowledged writes lost (P2 changed, P3 not
# resolving) and each failover's seconds from the fault to the first
# acknowledged write through vfps (the failover breakdown's); then the totals,
# and per scenario that figure's median and maximum over every failover.
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
# A 20 s baseline: the main job's guards need load before the fault (an
# erasure of a multi-pseudonym original needs three of them acknowledged).
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
  lines=$(python3 - "$dir" "$scenarios" "$status" "$i" <<'PY'
import json, sys
d, scenarios, status, i = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4]
try:
    s = json.load(open(f"{d}/summary.json"))
    per = {x["scenario"]: x for x in json.load(open(f"{d}/scenarios.json"))}
except OSError:
    for scenario in scenarios:
        print(f"{i:<4} {'ERROR':<6} {scenario:<22} {'-':<10} {'-':<14} {'-':<10} {'-':<10} {'-':<20} -")
    sys.exit()
v = {x["property"]: x for x in s["verdicts"]}
count = lambda p: int(v[p]["summary"].split()[0]) if p in v else -1
result = "PASS" if status == 0 and s["passed"] else "FAIL"
for scenario in scenarios:
    failovers = [f for f in s.get("failovers") or [] if f["scenario"] == scenario]
    outage = per[scenario]["availability"]["longest_outage_seconds"] if scenario in per else -1
    # A failover whose first write the breakdown did not see counts as "?".
    to_write = [
        f"{f['first_write_seconds'] - f['fault_seconds']:.1f}" if f.get("first_write_seconds") else "?"
        for f in failovers
    ]
    print(f"{i:<4} {result:<6} {scenario:<22} {len(failovers):<10} {str(outage) + 's':<14} {count('P2-pseudonym-stability'):<10} {count('P3-reverse-lookup'):<10} {s['seed']:<20} {','.join(to_write) or '-'}")
PY
)
  echo "$lines" | tee -a "$tally"
  case "$lines" in *PASS*) ;; *) failed=$((failed + 1)) ;; esac
done
python3 - "$tally" "$runs" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
runs = {}
for r in rows:
    runs.setdefault(r[0], r)
ok = [r for r in runs.values() if r[1] == "PASS"]
# P2 and P3 are the run's: counted once per run.
lost = sum(int(r[6]) for r in runs.values() if r[6].lstrip("-").isdigit() and int(r[6]) > 0)
changed = sum(int(r[5]) for r in runs.values() if r[5].lstrip("-").isdigit() and int(r[5]) > 0)
failovers = sum(int(r[3]) for r in rows if r[3].isdigit())
print(f"tally: {len(ok)}/{sys.argv[2]} runs passed, {failovers} failovers, {lost} acknowledged writes lost (P3), {changed} pseudonyms changed (P2)")
for scenario in dict.fromkeys(r[2] for r in rows):
    mine = [r for r in rows if r[2] == scenario]
    seen = [x for r in mine if len(r) > 8 for x in r[8].split(",") if x not in ("-", "")]
    times = sorted(float(x) for x in seen if x != "?")
    outages = sorted(int(r[4].rstrip("s")) for r in mine if r[4].rstrip("s").lstrip("-").isdigit())
    if times:
        median = (times[(len(times) - 1) // 2] + times[len(times) // 2]) / 2
        print(f"{scenario}: fault to first acknowledged write median {median:.1f} s, max {times[-1]:.1f} s over {len(times)} failovers ({len(seen) - len(times)} without a write seen); longest outage per run {outages[0] if outages else '-'}-{outages[-1] if outages else '-'} s")
    else:
        print(f"{scenario}: no failover with a first write seen; longest outage per run {outages[0] if outages else '-'}-{outages[-1] if outages else '-'} s")
PY
echo "repeat-scenario: run directories under $out"
[ "$failed" -eq 0 ]
