#!/usr/bin/env bash
# Measures the local HA platform over N trimmed chaos runs (default 5) and prints
# min / median / max of the longest outage and unavailable seconds per scenario,
# plus the time from nothing to steady state. Needs root. Figures go into
# docs/performance.md by hand, with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
out=runs/measure-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  echo "== run $i/$runs"
  RESILIENCE_OUTPUT_DIR="$out/run-$i" ./scripts/chaos-local.sh --ci >"$out/run-$i.log" 2>&1 || echo "run $i failed (see $out/run-$i.log)"
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys, os
out, runs = sys.argv[1], int(sys.argv[2])
per, steady = {}, []
for i in range(1, runs + 1):
    d = os.path.join(out, f"run-{i}")
    try:
        for s in json.load(open(os.path.join(d, "scenarios.json"))):
            a = s["availability"]
            per.setdefault(s["scenario"], []).append((a["longest_outage_seconds"], a["unavailable_seconds"]))
        steady.append(float(open(os.path.join(d, "steady-state-seconds.txt")).read()))
    except OSError as e:
        print(f"run {i}: {e}")
def mmm(xs):
    return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}" if xs else "n/a"
print(f"| scenario | runs | longest outage s (min / median / max) | unavailable s (min / median / max) |")
print("|---|---|---|---|")
for name, v in per.items():
    print(f"| {name} | {len(v)} | {mmm([o for o, _ in v])} | {mmm([u for _, u in v])} |")
print(f"| nothing → steady state (s) | {len(steady)} | {mmm(steady)} | |")
PY
