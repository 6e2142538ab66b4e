#!/usr/bin/env bash
# The Kubernetes HA chaos run on kind: CloudNativePG, Chaos Mesh, 3 vfps replicas,
# the load generator as a Job.
#   run.sh all | up | scenarios | collect | down
# Needs kind, kubectl, helm, envsubst, docker and the two images built locally:
#   docker buildx build --load -t ghcr.io/miracum/vfps:ci .
#   docker buildx build --load --target=stress-test -t ghcr.io/miracum/vfps/stress-test:ci .
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
CLUSTER_NAME=${CLUSTER_NAME:-vfps-ha}
IMAGE_TAG=${IMAGE_TAG:-ci}
NS=vfps
OUT=${OUT:-$repo/runs/kind}
SCENARIOS=${SCENARIOS:-baseline,vfps-pod-kill,cnpg-primary-kill,db-network-partition,rollout,drain}
DURATION_BASELINE=${DURATION_BASELINE:-60}
DURATION_VFPS_POD_KILL=${DURATION_VFPS_POD_KILL:-135}
DURATION_CNPG_PRIMARY_KILL=${DURATION_CNPG_PRIMARY_KILL:-240}
DURATION_DB_NETWORK_PARTITION=${DURATION_DB_NETWORK_PARTITION:-180}
DURATION_ROLLOUT=${DURATION_ROLLOUT:-180}
DURATION_DRAIN=${DURATION_DRAIN:-180}
LOAD_MARGIN_SECONDS=${LOAD_MARGIN_SECONDS:-60}
export RESILIENCE_RATE_PER_SECOND=${RESILIENCE_RATE_PER_SECOND:-50}
export RESILIENCE_SETTLE_SECONDS=${RESILIENCE_SETTLE_SECONDS:-60}
export RESILIENCE_MAX_OUTAGE_SECONDS=${RESILIENCE_MAX_OUTAGE_SECONDS:-30}
export RESILIENCE_MAX_UNAVAILABLE_SECONDS=${RESILIENCE_MAX_UNAVAILABLE_SECONDS:-150}
export IMAGE_TAG

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; mkdir -p "$OUT"; echo "$*" >>"$OUT/failures.txt"; exit 1; }

duration_of() {
  local var
  var="DURATION_$(echo "$1" | tr 'a-z-' 'A-Z_')"
  echo "${!var:?unknown scenario $1}"
}

# The load window: the scenario durations plus a margin, computed here only.
load_seconds() {
  local total=$LOAD_MARGIN_SECONDS s
  IFS=, read -ra list <<<"$SCENARIOS"
  for s in "${list[@]}"; do total=$((total + $(duration_of "$s"))); done
  echo "$total"
}

check_inotify() {
  [ "$(uname)" = Linux ] || return 0
  local inst watches
  inst=$(sysctl -n fs.inotify.max_user_instances)
  watches=$(sysctl -n fs.inotify.max_user_watches)
  if [ "$inst" -lt 512 ] || [ "$watches" -lt 524288 ]; then
    die "inotify limits too low for a 4-node kind cluster (instances=$inst, watches=$watches); fix: sudo sysctl fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288"
  fi
}

cnpg_ready() { kubectl -n "$NS" get cluster vfps-db -o jsonpath='{.status.readyInstances}' 2>/dev/null || echo 0; }

wait_cnpg_healthy() {
  local deadline=$((SECONDS + ${1:-600}))
  until [ "$(cnpg_ready)" = 3 ]; do
    [ $SECONDS -lt $deadline ] || die "CloudNativePG never reached 3 ready instances"
    sleep 5
  done
}

up() {
  check_inotify
  kind create cluster --name "$CLUSTER_NAME" --config "$here/kind-config.yaml" --wait 120s
  kind load docker-image --name "$CLUSTER_NAME" "ghcr.io/miracum/vfps:$IMAGE_TAG" "ghcr.io/miracum/vfps/stress-test:$IMAGE_TAG"
  helm repo add cnpg https://cloudnative-pg.github.io/charts >/dev/null
  helm repo add chaos-mesh https://charts.chaos-mesh.org >/dev/null
  helm upgrade --install cnpg cnpg/cloudnative-pg -n cnpg-system --create-namespace --wait
  helm upgrade --install chaos-mesh chaos-mesh/chaos-mesh -n chaos-mesh --create-namespace --wait \
    --set dashboard.create=false \
    --set chaosDaemon.runtime=containerd \
    --set chaosDaemon.socketPath=/run/containerd/containerd.sock
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
  kubectl apply -f "$here/cnpg-cluster.yaml"
  wait_cnpg_healthy 900
  helm upgrade --install vfps "$repo/charts/vfps" -n "$NS" -f "$here/vfps-ha-values.yaml" \
    --set image.tag="$IMAGE_TAG" --wait --timeout 10m
  kubectl -n "$NS" rollout status deployment/vfps --timeout=5m
  log "steady state: 3 ready database instances, vfps rolled out"
}

event() { printf '%s,%s,%s\n' "$(date -u +%s.%N)" "$1" "$2" >>"$OUT/chaos-timeline.csv"; log "$1: $2"; }

scenario() {
  local name=$1 d end
  d=$(duration_of "$name")
  end=$((SECONDS + d))
  event "$name" start
  case "$name" in
    baseline) ;;
    vfps-pod-kill)
      kubectl apply -f "$here/chaos/vfps-pod-kill.yaml"; event "$name" applied
      sleep "$d"
      kubectl delete -f "$here/chaos/vfps-pod-kill.yaml"; event "$name" healed ;;
    cnpg-primary-kill)
      while [ $((end - SECONDS)) -gt 60 ] || ! grep -q "$name,applied" "$OUT/chaos-timeline.csv"; do
        wait_cnpg_healthy 300
        kubectl -n "$NS" get pods -l cnpg.io/instanceRole=primary -o name | grep -q . \
          || die "no pod is labelled cnpg.io/instanceRole=primary: cannot kill the primary"
        kubectl delete -f "$here/chaos/cnpg-primary-kill.yaml" --ignore-not-found
        kubectl apply -f "$here/chaos/cnpg-primary-kill.yaml"; event "$name" applied
        sleep 20
        wait_cnpg_healthy 300; event "$name" healed
      done
      kubectl delete -f "$here/chaos/cnpg-primary-kill.yaml" --ignore-not-found ;;
    db-network-partition)
      wait_cnpg_healthy 300
      kubectl apply -f "$here/chaos/db-network-partition.yaml"; event "$name" applied
      sleep "$d"
      kubectl delete -f "$here/chaos/db-network-partition.yaml"; event "$name" healed ;;
    rollout)
      kubectl -n "$NS" rollout restart deployment/vfps; event "$name" applied
      kubectl -n "$NS" rollout status deployment/vfps --timeout=10m; event "$name" healed ;;
    drain)
      wait_cnpg_healthy 300
      local node
      node=$(kubectl -n "$NS" get pods -l app.kubernetes.io/name=vfps -o jsonpath='{.items[0].spec.nodeName}')
      event "$name" "applied:$node"
      local ok=0
      kubectl drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout=120s || ok=$?
      kubectl uncordon "$node"
      [ "$ok" = 0 ] || die "drain of $node timed out (PodDisruptionBudget or stuck pod)"
      wait_cnpg_healthy 600
      kubectl -n "$NS" rollout status deployment/vfps --timeout=10m; event "$name" healed ;;
    *) die "unknown scenario $name" ;;
  esac
  [ $SECONDS -le $end ] || log "$name overran its window by $((SECONDS - end)) s"
  while [ $SECONDS -lt $end ]; do sleep 1; done
  event "$name" end
}

scenarios() {
  mkdir -p "$OUT"
  echo "timestamp,scenario,event" >"$OUT/chaos-timeline.csv"
  local load settle deadline started
  load=$(load_seconds)
  settle=$RESILIENCE_SETTLE_SECONDS
  deadline=$((load + settle + 900))
  export RESILIENCE_LOAD_SECONDS=$load LOADGEN_DEADLINE_SECONDS=$deadline
  kubectl delete -f "$here/loadgen-job.yaml" --ignore-not-found --wait
  envsubst <"$here/loadgen-job.yaml" | kubectl apply -f -
  kubectl -n vfps-loadgen wait --for=condition=Ready pod -l app.kubernetes.io/name=vfps-loadgen --timeout=5m
  started=$SECONDS
  IFS=, read -ra list <<<"$SCENARIOS"
  for s in "${list[@]}"; do scenario "$s"; done
  [ $((SECONDS - started)) -le "$load" ] || die "chaos overran the load window ($((SECONDS - started)) s > $load s)"
  kubectl -n vfps-loadgen wait --for=condition=complete job/vfps-loadgen --timeout="$((settle + 900))s" \
    || log "load generator job did not complete successfully"
}

collect() {
  mkdir -p "$OUT/cluster-dump"
  kubectl -n vfps-loadgen logs job/vfps-loadgen >"$OUT/resilience.log" 2>&1 || true
  sed -n '/^----BEGIN TIMELINE CSV----$/,/^----END TIMELINE CSV----$/p' "$OUT/resilience.log" \
    | sed '1d;$d' >"$OUT/load-timeline.csv"
  [ -s "$OUT/load-timeline.csv" ] || die "no timeline between the markers in resilience.log: the load generator did not report"
  kubectl get pods -A -o wide >"$OUT/pods.txt" 2>&1 || true
  kubectl get events -A --sort-by=.lastTimestamp >"$OUT/events.txt" 2>&1 || true
  kubectl -n "$NS" get cluster vfps-db -o yaml >"$OUT/cnpg-cluster.yaml" 2>&1 || true
  kubectl -n "$NS" logs -l cnpg.io/cluster=vfps-db --all-containers --prefix --tail=-1 >"$OUT/cnpg-instances.log" 2>&1 || true
  kubectl -n "$NS" logs -l app.kubernetes.io/name=vfps --all-containers --prefix --tail=-1 >"$OUT/vfps-api.log" 2>&1 || true
  kubectl cluster-info dump --all-namespaces --output-directory="$OUT/cluster-dump" >/dev/null 2>&1 || true
  if ! grep -q '^PASS$' "$OUT/resilience.log"; then
    grep -E 'invalid|unknown|harness failure' "$OUT/resilience.log" >>"$OUT/failures.txt" || echo "the load generator did not pass" >>"$OUT/failures.txt"
  fi
  [ ! -s "$OUT/failures.txt" ] || { log "failures:"; cat "$OUT/failures.txt" >&2; return 1; }
  log "PASS ($OUT)"
}

down() { kind delete cluster --name "$CLUSTER_NAME" || true; }

all() {
  local status=0
  up && scenarios && collect || status=$?
  down
  return "$status"
}

case "${1:-}" in
  all | up | scenarios | collect | down) "$1" ;;
  load-seconds) load_seconds ;;
  *) echo "usage: $0 all|up|scenarios|collect|down|load-seconds" >&2; exit 2 ;;
esac
