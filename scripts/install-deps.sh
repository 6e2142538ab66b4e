#!/usr/bin/env bash
# Installs the Debian packages the tests and the local chaos platform need.
# Idempotent; needs root (or sudo).
set -euo pipefail

# PostgreSQL (and openssl for its test certificates) for the tests, DejaVu for the
# report chart's text; etcd + iproute2 +
# nftables for the local HA platform, HAProxy as its load balancer before the
# replicas (the web UI's ingress); barman-cli-cloud for continuous backup of the
# local platform's PostgreSQL to its object store (the tool family CloudNativePG
# runs on the kind path; docs/backup.md). Patroni comes from PyPI, pinned (below): the
# Debian package (3.0.2) can split the brain after a paused leader resumes.
packages=(postgresql-15 postgresql-client-15 etcd-server etcd-client iproute2 nftables util-linux procps curl openssl python3-venv fonts-dejavu-core haproxy barman-cli-cloud softhsm2)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
  # The Debian packages may start a default cluster, an etcd and an HAProxy; the project makes its own.
  for unit in postgresql etcd patroni haproxy; do
    "${sudo_cmd[@]}" systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
fi

# A pinned Python tool in a virtual environment of its own, made anew when its
# requirements change: venv NAME DIR REQUIREMENTS PROGRAM (PROGRAM, inside DIR,
# must exist afterwards).
venv() {
  local name=$1 dir=$2 requirements=$3 program=$4
  if ! cmp -s "$requirements" "$dir/requirements.txt" 2>/dev/null || [ ! -x "$dir/$program" ]; then
    echo "install-deps: $name from PyPI into $dir"
    "${sudo_cmd[@]}" rm -rf "$dir"
    "${sudo_cmd[@]}" /usr/bin/python3 -m venv "$dir"
    "${sudo_cmd[@]}" "$dir/bin/pip" install -q --disable-pip-version-check --no-deps -r "$requirements"
    "${sudo_cmd[@]}" cp "$requirements" "$dir/requirements.txt"
  fi
}

# Patroni (VFPS_PATRONI_DIR; the local platform runs $VFPS_PATRONI_DIR/bin/patroni).
patroni_dir=${VFPS_PATRONI_DIR:-/opt/vfps-chaos/patroni}
venv Patroni "$patroni_dir" "$(dirname "$0")/patroni-requirements.txt" bin/patroni
"$patroni_dir/bin/patroni" --version

# moto (VFPS_MOTO_DIR): AWS KMS and STS for the tests of the aws-kms key source.
moto_dir=${VFPS_MOTO_DIR:-/opt/vfps-chaos/moto}
venv moto "$moto_dir" "$(dirname "$0")/moto-requirements.txt" bin/python
"$moto_dir/bin/python" -c 'import moto.server, boto3; print("moto", moto.__version__)'

# Garage, pinned, from crates.io: the S3-compatible store the job tests and the
# local platform run (built once per machine; CI builds it in the background).
if [ -z "${VFPS_GARAGE_IN_BACKGROUND:-}" ]; then
  "$(dirname "$0")/install-garage.sh"
fi
