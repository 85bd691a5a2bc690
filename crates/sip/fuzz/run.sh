#!/usr/bin/env bash
# Runs every ontime-sip fuzz target for a bounded time (default 30 s each); skips with a reason
# when cargo-fuzz or a nightly toolchain is missing. Usage: crates/sip/fuzz/run.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-30}
if ! command -v cargo-fuzz >/dev/null; then
    echo "ontime-sip fuzz: skipped (cargo-fuzz not installed: cargo install cargo-fuzz)"
    exit 0
fi
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "ontime-sip fuzz: skipped (no nightly toolchain)"
    exit 0
fi
for target in parse_message endpoint sdp; do
    mkdir -p "corpus/$target"
    seeds=()
    [ -d "seeds/$target" ] && seeds=("seeds/$target")
    cargo +nightly fuzz run "$target" "corpus/$target" "${seeds[@]}" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | grep -E '^(Done|==[0-9]+== ERROR|thread .* panicked)' || true
    # cargo fuzz exits non-zero on a crash and leaves the input in artifacts/.
    if [ -n "$(ls -A "artifacts/$target" 2>/dev/null)" ]; then
        echo "ontime-sip fuzz: $target found a crash: $(ls "artifacts/$target")"
        exit 1
    fi
done
