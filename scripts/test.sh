#!/usr/bin/env bash
# Runs every test of the workspace: installs what the tests need, then cargo test.
# Tests start their own throwaway PostgreSQL clusters (initdb/pg_ctl, no Docker).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "test.sh: the local platform tests create network namespaces and need root; run as root" >&2
  exit 2
fi
./scripts/install-deps.sh
# The REST API's OpenAPI document (served at /swagger/v1/swagger.json) by a
# real validator: openapi-spec-validator from PyPI, pinned with all it imports
# (scripts/openapi-requirements.txt), in a virtual environment of its own.
validator=.tools/openapi-spec-validator
if ! cmp -s scripts/openapi-requirements.txt "$validator/requirements.txt" 2>/dev/null \
  || [ ! -x "$validator/bin/openapi-spec-validator" ]; then
  rm -rf "$validator"
  /usr/bin/python3 -m venv "$validator"
  "$validator/bin/pip" install -q --disable-pip-version-check --no-deps -r scripts/openapi-requirements.txt
  "$validator/bin/pip" check >/dev/null
  cp scripts/openapi-requirements.txt "$validator/requirements.txt"
fi
"$validator/bin/openapi-spec-validator" crates/vfps-server/assets/openapi.json
# The MII IG's example instances, as the FHIR tests read them, are what its
# FSH files say (tests/mii-ig/README.md).
/usr/bin/python3 scripts/fsh-instances.py --check tests/mii-ig/fsh tests/mii-ig/examples.json
# Chromium and tests/ui's packages: the browser tests, the browser probe's tests
# and the local platform's identity provider need them.
./scripts/install-ui-test-deps.sh
# --include-ignored: the platform tests are ignored in a plain `cargo test` (they
# need root, Patroni and etcd, or a browser); here they run.
cargo test --workspace --locked "$@" -- --include-ignored
# The admin UI in a real browser, against the binary the tests built.
./scripts/ui-test.sh
# The FHIR and Bundle parsers under libFuzzer (cargo fuzz's targets in fuzz/).
./scripts/fuzz-fhir.sh "${VFPS_FUZZ_SECONDS:-30}"
