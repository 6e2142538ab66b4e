#!/usr/bin/env bash
# Installs Garage (a distributed S3-compatible object store, AGPL-3.0, run as its
# own process, never linked into vfps) from crates.io, pinned, into
# $VFPS_GARAGE_DIR (default /opt/vfps-chaos/garage-<version>). Built once per
# machine: a present binary of the pinned version is kept.
#
# Only what the tests and the local platform use is built (the SQLite metadata
# engine; no LMDB, K2V, metrics or discovery), unoptimized: a fraction of the
# default build's time, and Garage's speed is not what we measure. The flags
# are stamped beside the binary; a binary built otherwise is rebuilt.
set -euo pipefail
version=2.5.0
dir=${VFPS_GARAGE_DIR:-/opt/vfps-chaos/garage-$version}
# One build at a time: a second caller (CI starts one early, in the
# background) waits for the first and then finds the binary.
mkdir -p "$(dirname "$dir")"
exec 9>"$(dirname "$dir")/.garage-$version.lock"
flock 9
bin="$dir/bin/garage"
flags="features=bundled-libs,sqlite opt-level=0"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "$version" &&
  [ "$(cat "$dir/build-flags" 2>/dev/null)" = "$flags" ]; then
  echo "install-garage: $("$bin" --version | head -n 1) in $dir"
  exit 0
fi
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
target=$(mktemp -d "${TMPDIR:-/tmp}/garage-build.XXXXXX")
trap 'rm -rf "$target"' EXIT
echo "install-garage: building Garage $version from crates.io into $dir (several minutes on 2 cores)"
started=$SECONDS
"${sudo_cmd[@]}" env CARGO_TARGET_DIR="$target" \
  CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_DEBUG=0 \
  CARGO_PROFILE_RELEASE_INCREMENTAL=false CARGO_TERM_PROGRESS_WHEN=never \
  "$(command -v cargo)" install garage --version "$version" --locked --quiet --force \
  --no-default-features --features bundled-libs,sqlite --root "$dir"
echo "$flags" | "${sudo_cmd[@]}" tee "$dir/build-flags" >/dev/null
echo "install-garage: built in $((SECONDS - started)) s: $("$bin" --version | head -n 1)"
