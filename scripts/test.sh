#!/usr/bin/env bash
# The project's test command (README, `make test`, .ci/run): install what is missing, then run every
# test, clippy with -D warnings, rustfmt and cargo-deny.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$root/.cache/models/libonnxruntime.so.1.31.1}
export ONTIME_MODELS_DIR=${ONTIME_MODELS_DIR:-$root/.cache/models}
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The library without its default `cli` feature builds and pulls none of the binary's stack (the
# command line, log output, the Prometheus exporter): what an embedder's build compiles.
cargo clippy -p ontime-gateway --no-default-features -- -D warnings
cli_only=$(cargo tree -p ontime-gateway --no-default-features -e normal --prefix none \
    | grep -E '^(clap|tracing-subscriber|metrics-exporter-prometheus) ' | sort -u || true)
if [ -n "$cli_only" ]; then
  echo "ontime-gateway --no-default-features depends on the binary's crates:" >&2
  echo "$cli_only" >&2
  exit 1
fi
# Every crate stays publishable: package them all and build each from its .crate, through cargo's
# local overlay registry (path dependencies resolve to the packages being built).
# Cargo extracts those overlay packages under $CARGO_HOME/registry/src/-<hash of the overlay path>/
# and reuses an extracted name-version on the next run from the same checkout path, so a CI runner
# that keeps CARGO_HOME would verify against the previous submission's ontime-* sources (our versions
# stay 0.1.0 until released). Remove only those extracted ontime-* overlay copies first.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
find "$cargo_home/registry/src" -mindepth 2 -maxdepth 2 -path "$cargo_home/registry/src/-*/ontime*" \
    -type d -exec rm -rf {} + 2>/dev/null || true
cargo package --workspace --allow-dirty
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo deny --workspace check licenses bans sources
deploy/ci/check.sh
# Bounded coverage-guided fuzzing on the stable toolchain (libFuzzer, no nightly): the SIP parser,
# endpoint and SDP, and the RTP and RTCP parsers, 20 s each; a crash fails the run.
scripts/fuzz.sh 20
cargo test --workspace --all-targets --no-fail-fast
cargo test --workspace --doc
