#!/usr/bin/env bash
# The local HA chaos run: 3 vfps replicas and a 3-instance Patroni cluster in
# network namespaces, every scenario under continuous load, gated on P1-P4.
# Needs root. Durations come from DURATION_* (defaults: the full suite, ~17 min of
# load); `--ci` selects the trimmed set used by .ci/run (~5 min of load);
# `--self-test` runs db-primary-isolation on asynchronous replication and
# succeeds only if the harness reports the writes that loses (P3);
# `--self-test-jobs` kills a CSV job's runner on replicas that restart jobs
# from row 0 and succeeds only if the harness reports it (P7), then runs the
# restore drill with a restore that skips the WAL after the base backup and
# succeeds only if the harness reports what that loses (P9);
# `--self-test-erasure` (with VFPS_UNSAFE_REVEALING_PSEUDONYMS: P10 must fail
# on all three of its checks too) erases on replicas that neither announce erasures to
# the other replicas' pseudonym caches nor wait for the synchronous standby,
# through a baseline and a primary isolation, and succeeds only if the harness
# reports both (P8): erased mappings answered during the baseline (only the
# caches can do that without a failover) and held by the database after the
# failover (only the unwaited commit can do that). `--self-test-erasure-cache`
# and `--self-test-erasure-standby` test each mode alone.
# `--self-test` also runs without a key file (VFPS_CHAOS_KEYS=false): P11 must
# find the originals at rest too. Every run's load speaks the MII interface too (mii, bundle, erase in the mix).
# The full run and `--ci` end with the restore drill (db-restore-drill, P9):
# the database archives its WAL to the object store's backup bucket
# (VFPS_CHAOS_BACKUP, archive_timeout VFPS_CHAOS_ARCHIVE_TIMEOUT=5 s).
# Every run but the self-tests stands up the web UI's identity provider and
# load balancer and runs the browser probe (VFPS_CHAOS_UI=false: the API alone).
# The run directory (report.html, timelines, logs) is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "chaos-local: needs root (network namespaces, nftables); run it with sudo" >&2
  exit 2
fi
profile=${1:-full}
./scripts/install-deps.sh
db_profile=safe
# The MII interface beside gRPC: FHIR calls, batch Bundles and erasures (P8).
export RESILIENCE_MIX=${RESILIENCE_MIX:-create=60,recreate=14,get=14,list=4,churn=6,bad=2,mii=4,bundle=1,erase=2}
case "$profile" in
  --ci | --self-test | --self-test-jobs | --self-test-erasure | --self-test-erasure-cache | --self-test-erasure-standby)
    cargo build --locked --bins -p vfps-server -p vfps-chaos
    bin=${CARGO_TARGET_DIR:-target}/debug
    # Short windows for every scenario; the replicas inherit a 10 s readiness
    # grace so that vfps-partition shows a replica leaving rotation quickly.
    # db-double-failover heals in 39-55 s here (two Patroni failovers, then both
    # killed instances restarted): its window has room for the slow end.
    export DURATION_BASELINE=${DURATION_BASELINE:-8} DURATION_VFPS_POD_KILL=${DURATION_VFPS_POD_KILL:-14} \
      POD_KILL_INTERVAL_SECONDS=${POD_KILL_INTERVAL_SECONDS:-7} DURATION_DB_PRIMARY_KILL=${DURATION_DB_PRIMARY_KILL:-32} \
      DURATION_DB_NETWORK_PARTITION=${DURATION_DB_NETWORK_PARTITION:-16} PARTITION_BURST_SECONDS=${PARTITION_BURST_SECONDS:-6} \
      PARTITION_EVERY_SECONDS=${PARTITION_EVERY_SECONDS:-12} DURATION_ROLLOUT=${DURATION_ROLLOUT:-16} \
      MIN_READY_SECONDS=${MIN_READY_SECONDS:-2} DURATION_DRAIN=${DURATION_DRAIN:-20} DRAIN_HOLD_SECONDS=${DRAIN_HOLD_SECONDS:-5} \
      DURATION_DB_PRIMARY_PAUSE=${DURATION_DB_PRIMARY_PAUSE:-35} PAUSE_SECONDS=${PAUSE_SECONDS:-12} \
      DURATION_DB_PRIMARY_ISOLATION=${DURATION_DB_PRIMARY_ISOLATION:-35} ISOLATION_SECONDS=${ISOLATION_SECONDS:-8} \
      DURATION_DB_SYNC_STANDBY_KILL=${DURATION_DB_SYNC_STANDBY_KILL:-20} \
      DURATION_VFPS_POD_PAUSE=${DURATION_VFPS_POD_PAUSE:-20} VFPS_PAUSE_SECONDS=${VFPS_PAUSE_SECONDS:-8} \
      DURATION_VFPS_PARTITION=${DURATION_VFPS_PARTITION:-28} VFPS_PARTITION_SECONDS=${VFPS_PARTITION_SECONDS:-16} \
      VFPS_READINESS_DATABASE_GRACE=${VFPS_READINESS_DATABASE_GRACE:-10s} \
      DURATION_DB_DOUBLE_FAILOVER=${DURATION_DB_DOUBLE_FAILOVER:-65} \
      DURATION_VFPS_JOB_RUNNER_KILL=${DURATION_VFPS_JOB_RUNNER_KILL:-35} \
      DURATION_VFPS_JOB_RUNNER_PAUSE=${DURATION_VFPS_JOB_RUNNER_PAUSE:-35} \
      DURATION_OBJECTS_NODE_KILL=${DURATION_OBJECTS_NODE_KILL:-30} OBJECTS_DOWN_SECONDS=${OBJECTS_DOWN_SECONDS:-8} \
      DURATION_DB_RESTORE_DRILL=${DURATION_DB_RESTORE_DRILL:-75} RESTORE_WARMUP_SECONDS=${RESTORE_WARMUP_SECONDS:-3} \
      RESTORE_WRITES_AFTER_BACKUP_SECONDS=${RESTORE_WRITES_AFTER_BACKUP_SECONDS:-20} \
      RESTORE_MAX_LOST_SECONDS=${RESTORE_MAX_LOST_SECONDS:-10} RESTORE_MAX_LOST_WRITES=${RESTORE_MAX_LOST_WRITES:-500} \
      LOAD_MARGIN_SECONDS=${LOAD_MARGIN_SECONDS:-6} RESILIENCE_SETTLE_SECONDS=${RESILIENCE_SETTLE_SECONDS:-5} \
      RESILIENCE_MAX_UNAVAILABLE_SECONDS=${RESILIENCE_MAX_UNAVAILABLE_SECONDS:-120}
    if [ "$profile" = "--ci" ]; then
      # Caches are where erasures go stale: the CI run has the pseudonym cache
      # on (the namespace cache always is), big enough to hold the run.
      export Pseudonymization__Caching__Pseudonyms__IsEnabled=${Pseudonymization__Caching__Pseudonyms__IsEnabled:-true}
      export Pseudonymization__Caching__Pseudonyms__SizeLimit=${Pseudonymization__Caching__Pseudonyms__SizeLimit:-200000}
    fi
    if [ "$profile" = "--self-test-erasure" ]; then
      # Both unsafe erasure modes in one run (CI's time): each leaves its own
      # evidence, told apart by scenario and by the database.
      export VFPS_UNSAFE_ERASURE_UNANNOUNCED=true VFPS_UNSAFE_ERASURE_BEFORE_STANDBY=true
      # Folded in, to spare a platform of its own: pseudonyms that reveal (a
      # host tag and the clock, the originals' order, siblings made
      # together); P10 must fail on each of its three checks.
      export VFPS_UNSAFE_REVEALING_PSEUDONYMS=true
      export Pseudonymization__Caching__Pseudonyms__IsEnabled=true
      export Pseudonymization__Caching__Pseudonyms__SizeLimit=200000
      export SCENARIOS=${SCENARIOS:-baseline,db-primary-isolation} DURATION_BASELINE=${DURATION_BASELINE_SELF_TEST:-15}
      export VFPS_CHAOS_UI=${VFPS_CHAOS_UI:-false}
    fi
    if [ "$profile" = "--self-test-erasure-cache" ]; then
      # P8's self-test: erasures not announced, so the replica that cached a
      # subject keeps answering its erased pseudonym; the run must fail on it.
      export VFPS_UNSAFE_ERASURE_UNANNOUNCED=true
      export Pseudonymization__Caching__Pseudonyms__IsEnabled=true
      export Pseudonymization__Caching__Pseudonyms__SizeLimit=200000
      export SCENARIOS=${SCENARIOS:-baseline} DURATION_BASELINE=${DURATION_BASELINE_SELF_TEST:-25}
      export VFPS_CHAOS_UI=${VFPS_CHAOS_UI:-false}
    fi
    if [ "$profile" = "--self-test-erasure-standby" ]; then
      # P8's self-test: erasures acknowledged before the synchronous standby
      # has them; the isolated primary's are undone by the failover.
      export VFPS_UNSAFE_ERASURE_BEFORE_STANDBY=true
      export SCENARIOS=${SCENARIOS:-baseline,db-primary-isolation}
      export VFPS_CHAOS_UI=${VFPS_CHAOS_UI:-false}
    fi
    if [ "$profile" = "--self-test" ]; then
      # The harness's self-test: asynchronous replication and an isolated
      # primary lose acknowledged writes; the run must fail on them.
      # (No CSV jobs beside it: their WAL would put the standbys past
      # Patroni's maximum_lag_on_failover, and nothing would be promoted.)
      db_profile=unsafe-async
      export SCENARIOS=${SCENARIOS:-baseline,db-primary-isolation}
      # P10's probe belongs to the main run and the erasure self-test.
      export RESILIENCE_PRIVACY_PROBE=${RESILIENCE_PRIVACY_PROBE:-false}
      # Folded in: P11's unsafe mode, originals not sealed (no key file);
      # P11 must find them at rest, naming where.
      export VFPS_CHAOS_KEYS=false
      export VFPS_CHAOS_UI=${VFPS_CHAOS_UI:-false}
    fi
    if [ "$profile" = "--self-test-jobs" ]; then
      # The harness's self-test of P7: replicas that restart a job from row 0
      # when they take it over redo work; the run must fail on it.
      export VFPS_UNSAFE_JOBS_RESTART_FROM_ZERO=true
      # Folded in, to spare a platform of its own: the restore drill's unsafe
      # setting (a restore that skips the WAL after the base backup, which
      # loses the 20 s of writes after it); P9 must fail on it.
      export RESTORE_DRILL_TO=backup-only
      export SCENARIOS=${SCENARIOS:-baseline,vfps-job-runner-kill,db-restore-drill}
      export RESILIENCE_PRIVACY_PROBE=${RESILIENCE_PRIVACY_PROBE:-false}
      export VFPS_CHAOS_UI=${VFPS_CHAOS_UI:-false}
    fi
    ;;
  full)
    cargo build --locked --release --bins -p vfps-server -p vfps-chaos
    bin=${CARGO_TARGET_DIR:-target}/release
    ;;
  *)
    echo "chaos-local: unknown profile $profile (full, --ci, --self-test, --self-test-jobs, --self-test-erasure, --self-test-erasure-cache, --self-test-erasure-standby)" >&2
    exit 2
    ;;
esac
# The restore drill needs the WAL archive (not the asynchronous self-test, which has no drill).
if [ "$profile" != --self-test ]; then
  export VFPS_CHAOS_BACKUP=${VFPS_CHAOS_BACKUP:-true} VFPS_CHAOS_ARCHIVE_TIMEOUT=${VFPS_CHAOS_ARCHIVE_TIMEOUT:-5}
fi
# Chromium and the browser probe's packages.
if [ "${VFPS_CHAOS_UI:-true}" != false ]; then
  ./scripts/install-ui-test-deps.sh
fi
# The whole run's longest-outage gate is never below a scenario's own budget:
# a double failover rightly blocks writes until a killed instance is back (40 s).
export RESILIENCE_MAX_OUTAGE_SECONDS=${RESILIENCE_MAX_OUTAGE_SECONDS:-40}
export RESILIENCE_OUTPUT_DIR=${RESILIENCE_OUTPUT_DIR:-runs/local-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESILIENCE_OUTPUT_DIR"
status=0
# The generator's and driver's own output is part of the run's evidence.
"$bin/vfps-chaos" local all --database-profile "$db_profile" 2>&1 | tee "$RESILIENCE_OUTPUT_DIR/vfps-chaos.log" || status=${PIPESTATUS[0]}
# down is idempotent and runs whatever happened.
"$bin/vfps-chaos" local down || true
echo "chaos-local: run directory $RESILIENCE_OUTPUT_DIR (exit $status)"
# What the self-tests look for in the summary: acknowledged writes lost (P3),
# and jobs resumed behind their checkpoint (P7).
p3_lost() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
p3 = v.get("P3-reverse-lookup", {})
print(p3.get("summary", "").split(" ")[0] if p3.get("validity") == "invalid" and p3.get("evidence") else 0)' "$RESILIENCE_OUTPUT_DIR/summary.json" 2>/dev/null || echo 0
}
p9_rpo_failed() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
p9 = v.get("P9-restore-drill", {})
print(sum(e.startswith("RPO:") for e in p9.get("evidence", [])) if p9.get("validity") == "invalid" else 0)' "$RESILIENCE_OUTPUT_DIR/summary.json" 2>/dev/null || echo 0
}
p7_redone() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
p7 = v.get("P7-jobs", {})
print(sum("resumed at row" in e for e in p7.get("evidence", [])) if p7.get("validity") == "invalid" else 0)' "$RESILIENCE_OUTPUT_DIR/summary.json" 2>/dev/null || echo 0
}
# ... and erased mappings answered (P8): `p8_found KIND` counts P8 findings
# of the cache mode (answered during the baseline: no failover there; most
# from the load's cache checks, which ask every replica again right after an
# acknowledged erasure: `cache-checks` counts those) or of the standby mode
# (held by the database after the failover).
p8_found() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
p8 = v.get("P8-erased-stays-erased", {})
db = v.get("P8-erased-in-database", {})
bad = lambda x: x.get("validity") == "invalid"
if sys.argv[2] == "cache":
    print(sum("[baseline]" in e for e in p8.get("evidence", [])) if bad(p8) else 0)
elif sys.argv[2] == "cache-checks":
    print(sum("[baseline]" in e and "after the acknowledgement" in e for e in p8.get("evidence", [])) if bad(p8) else 0)
else:
    print(len(db.get("evidence", [])) if bad(db) else 0)' "$RESILIENCE_OUTPUT_DIR/summary.json" "$1" 2>/dev/null || echo 0
}
# ... and originals at rest (P11): how many places held them.
p11_places() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
p11 = v.get("P11-nothing-at-rest", {})
print(sum(1 for e in p11.get("evidence", []) if "plain text" in e) if p11.get("validity") == "invalid" else 0)' "$RESILIENCE_OUTPUT_DIR/summary.json" 2>/dev/null || echo 0
}
# ... and pseudonyms that reveal (P10): how many of its three checks failed
# with evidence.
p10_failed() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
v = {x["property"]: x for x in s["verdicts"]}
names = ["P10-time-and-replica", "P10-order", "P10-siblings"]
print(sum(1 for n in names if v.get(n, {}).get("validity") == "invalid" and v[n].get("evidence")))' "$RESILIENCE_OUTPUT_DIR/summary.json" 2>/dev/null || echo 0
}
case "$profile" in
  --self-test-erasure | --self-test-erasure-cache | --self-test-erasure-standby)
    cache=$(p8_found cache)
    cache_checks=$(p8_found cache-checks)
    standby=$(p8_found standby)
    case "$profile" in
      --self-test-erasure)
        revealed=$(p10_failed)
        detected=$([ "${cache:-0}" -gt 0 ] && [ "${standby:-0}" -gt 0 ] && [ "${revealed:-0}" -eq 3 ] && echo yes || echo no) ;;
      --self-test-erasure-cache) detected=$([ "${cache:-0}" -gt 0 ] && echo yes || echo no) ;;
      *) detected=$([ "${standby:-0}" -gt 0 ] && echo yes || echo no) ;;
    esac
    if [ "$status" -ne 0 ] && [ "$detected" = yes ]; then
      echo "chaos-local: self-test passed ($profile): the harness reported erased mappings answered from caches ($cache during the baseline, $cache_checks of them by replicas asked again after the acknowledgement) and held by the database after a failover ($standby) (P8)${revealed:+, and revealing pseudonyms on $revealed of the 3 P10 checks}"
      exit 0
    fi
    echo "chaos-local: self-test FAILED ($profile): the harness did not detect an unsafe erasure or revealing pseudonyms (exit $status, P8 cache findings ${cache:-0} (${cache_checks:-0} after the acknowledgement), database findings ${standby:-0}, P10 checks failed ${revealed:-n/a} of 3)" >&2
    exit 1
    ;;
esac
case "$profile" in
  --self-test)
    # Expected: the run failed, and on lost writes (P3) with evidence.
    lost=$(p3_lost)
    at_rest=$(p11_places)
    if [ "$status" -ne 0 ] && [ "${lost:-0}" -gt 0 ] && [ "${at_rest:-0}" -gt 0 ]; then
      echo "chaos-local: self-test passed: the unsafe profile lost $lost acknowledged writes and the harness reported them (P3); unsealed, the originals lay at rest in $at_rest places and the harness named them (P11)"
      exit 0
    fi
    echo "chaos-local: self-test FAILED: the harness did not detect a known loss or originals at rest (exit $status, P3 lost ${lost:-0}, P11 places ${at_rest:-0})" >&2
    exit 1
    ;;
  --self-test-jobs)
    redone=$(p7_redone)
    rpo=$(p9_rpo_failed)
    if [ "$status" -ne 0 ] && [ "${redone:-0}" -gt 0 ] && [ "${rpo:-0}" -gt 0 ]; then
      echo "chaos-local: self-test passed: replicas restarting jobs from row 0 redid work $redone times and the harness reported it (P7); the restore that skipped the archived WAL lost writes past the drill's RPO budget and the harness reported it (P9)"
      exit 0
    fi
    echo "chaos-local: self-test FAILED: the harness did not detect a job restarted from row 0 or a restore that skipped the archived WAL (exit $status, P7 findings ${redone:-0}, P9 RPO findings ${rpo:-0})" >&2
    exit 1
    ;;
esac
exit "$status"
