#!/usr/bin/env bash
# The Kubernetes HA chaos run on kind: CloudNativePG, Chaos Mesh, 3 vfps replicas,
# the load generator as a Job. The familiar entry point; the work is done by
# `vfps-chaos kind`, whose scenarios, order, health gates and checkers
# are the same code as the local platform's.
#   run.sh all | up | scenarios | collect | down | render DIR | restore --to latest|TIME
# Needs kind, kubectl, helm, docker (28 or later: images are saved per platform)
# and the two images built locally:
#   docker buildx build --load -t ghcr.io/miracum/vfps:ci .
#   docker buildx build --load --target=stress-test -t ghcr.io/miracum/vfps/stress-test:ci .
# Settings: SCENARIOS, DURATION_<SCENARIO>, MAX_OUTAGE_<SCENARIO>, LOAD_MARGIN_SECONDS,
# POD_KILL_INTERVAL_SECONDS, PARTITION_BURST_SECONDS, PARTITION_EVERY_SECONDS,
# DRAIN_HOLD_SECONDS, RESILIENCE_* (the load), CLUSTER_NAME, IMAGE_TAG (vfps under
# test), STRESS_TEST_TAG (the load generator and this driver; default IMAGE_TAG), OUT.
# The driver binary: $VFPS_CHAOS, else the one inside the stress-test image, else
# built with cargo.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
export IMAGE_TAG=${IMAGE_TAG:-ci}
export STRESS_TEST_TAG=${STRESS_TEST_TAG:-$IMAGE_TAG}
export RESILIENCE_OUTPUT_DIR=${OUT:-$repo/runs/kind}
export VFPS_CHAOS_ASSETS=$here VFPS_CHART=$repo/charts/vfps

driver() {
  if [ -n "${VFPS_CHAOS:-}" ]; then
    echo "$VFPS_CHAOS"
    return
  fi
  local dir=$repo/target/kind-driver image=ghcr.io/miracum/vfps/stress-test:$STRESS_TEST_TAG id
  mkdir -p "$dir"
  # The binary inside the image is Linux (of the image's architecture): it runs
  # here only on a Linux host of the same architecture. Elsewhere (macOS, arm64
  # with an amd64 image) the driver is built for this host.
  local host_arch image_arch=""
  host_arch=$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
  if command -v docker >/dev/null; then
    image_arch=$(docker image inspect --format '{{.Os}}/{{.Architecture}}' "$image" 2>/dev/null || true)
  fi
  if [ "$image_arch" = "linux/$host_arch" ] && [ "$(uname -s)" = Linux ]; then
    id=$(docker create "$image")
    docker cp "$id:/usr/local/bin/vfps-chaos" "$dir/vfps-chaos" >/dev/null
    docker rm "$id" >/dev/null
  else
    command -v cargo >/dev/null || {
      echo "run.sh: the driver in $image is ${image_arch:-missing} and cannot run on $(uname -s)/$host_arch; install Rust (cargo) to build it here, or set VFPS_CHAOS to a vfps-chaos built for this host" >&2
      exit 2
    }
    cargo build --release --locked -p vfps-chaos --manifest-path "$repo/Cargo.toml" >&2
    cp "$repo/target/release/vfps-chaos" "$dir/vfps-chaos"
  fi
  echo "$dir/vfps-chaos"
}

case "${1:-}" in
  all | up | scenarios | collect | down)
    mkdir -p "$RESILIENCE_OUTPUT_DIR"
    bin=$(driver)
    exec "$bin" kind "$1" ;;
  render)
    [ -n "${2:-}" ] || { echo "usage: $0 render DIR" >&2; exit 2; }
    bin=$(driver)
    exec "$bin" kind render --out "$2" ;;
  restore)
    # The database restored in place from its backup bucket (docs/backup.md).
    shift
    bin=$(driver)
    exec "$bin" kind restore "$@" ;;
  *) echo "usage: $0 all|up|scenarios|collect|down|render DIR|restore --to latest|TIME" >&2; exit 2 ;;
esac
