#!/usr/bin/env bash
# The FHIR and Bundle parsers (crates/vfps-fhir) under libFuzzer, coverage
# guided: cargo fuzz's targets in fuzz/ (`parameters`: any bytes as an MII
# operation's and as $create-pseudonym's body; `bundle`: any bytes as a
# Bundle, its entries and their Parameters), each for SECONDS (default 30),
# seeded with the MII IG's example instances. Fails on the first input that
# panics or is refused with an undocumented error kind; the input is kept in
# fuzz/artifacts/<target>/.
#   ./scripts/fuzz-fhir.sh [SECONDS]
# With cargo-fuzz installed the targets are built by `cargo fuzz build -s
# none -O` (and can be run with `cargo fuzz run <target>`); without it, by
# cargo itself with cargo-fuzz's coverage flags (no sanitizer: the parsers are
# safe Rust), so CI need not build cargo-fuzz. Either way the libFuzzer
# binaries run the same.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
case "$seconds" in '' | *[!0-9]*) echo "fuzz-fhir: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
targets=(parameters bundle)
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# The IG's examples: each Parameters a seed of `parameters`, each Bundle (and
# each Parameters wrapped in a one-entry batch) a seed of `bundle`.
/usr/bin/python3 - "$corpus" <<'PY'
import json, os, sys
root = sys.argv[1]
examples = json.load(open("tests/mii-ig/examples.json"))
for t in ("parameters", "bundle"):
    os.makedirs(os.path.join(root, t), exist_ok=True)
for i, (name, ex) in enumerate(sorted(examples.items())):
    kind = ex.get("resourceType")
    if kind == "Parameters":
        open(os.path.join(root, "parameters", f"{i}"), "w").write(json.dumps(ex))
        entry = {"request": {"method": "POST", "url": "$pseudonymize"}, "resource": ex}
        open(os.path.join(root, "bundle", f"p{i}"), "w").write(
            json.dumps({"resourceType": "Bundle", "type": "batch", "entry": [entry]}))
    elif kind == "Bundle":
        open(os.path.join(root, "bundle", f"{i}"), "w").write(json.dumps(ex))
PY
mkdir -p fuzz/artifacts
triple=$(rustc -vV | sed -n 's/^host: //p')
if command -v cargo-fuzz >/dev/null; then
  echo "fuzz-fhir: cargo fuzz, ${#targets[@]} targets, ${seconds} s each"
  (cd fuzz && cargo fuzz build -s none -O)
else
  echo "fuzz-fhir: cargo-fuzz not installed; building its targets with its flags (${#targets[@]} targets, ${seconds} s each)"
  RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
--cfg fuzzing -Cdebug-assertions" \
    cargo build --locked --release --quiet --manifest-path fuzz/Cargo.toml --target "$triple" --bins
fi
for t in "${targets[@]}"; do
  mkdir -p "fuzz/artifacts/$t"
  status=0
  "fuzz/target/$triple/release/$t" "$corpus/$t" -max_total_time="$seconds" \
    -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$corpus/$t.log" 2>&1 || status=$?
  grep -E "^(Done|stat::number_of_executed_units)" "$corpus/$t.log" | sed "s/^/fuzz-fhir: $t: /"
  if [ "$status" -ne 0 ]; then
    tail -n 30 "$corpus/$t.log" >&2
    echo "fuzz-fhir: $t failed; its input is in fuzz/artifacts/$t/" >&2
    exit 1
  fi
done
echo "fuzz-fhir: passed"
