#!/usr/bin/env bash
# Fuzzing on stable Rust: runs VFPS_FUZZ_CASES (default 1,200,000) generated
# inputs across every input parser (crates/vfps-server/tests/fuzz.rs) in release
# mode and prints the count; fails on the first input that panics or is
# answered with an undocumented error kind (shrunk to a minimal case).
set -euo pipefail
cd "$(dirname "$0")/.."
export VFPS_FUZZ_CASES=${1:-${VFPS_FUZZ_CASES:-1200000}}
echo "fuzz: $VFPS_FUZZ_CASES inputs (release build first)" >&2
exec cargo test --locked --release -p vfps-server --test fuzz
