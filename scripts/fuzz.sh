#!/usr/bin/env bash
# Coverage-guided fuzzing on the pinned stable toolchain, for a bounded time: every libFuzzer target
# of crates/sip/fuzz (parse_message, endpoint, sdp), crates/rtp/fuzz (rtp, rtcp, g722, opus), crates/twilio/fuzz
# (twiml: the TwiML parser; api_request: the API's request parsing) and gateway/fuzz (bot_message:
# the WebSocket agent's protocol.rs, compiled alone rather than the whole gateway).
#
# No cargo-fuzz and no nightly: the targets are plain binaries of the libfuzzer-sys crate (which
# compiles libFuzzer from its C++ source, so a C++ compiler is needed: scripts/setup.sh installs g++),
# instrumented with stable -C flags for SanitizerCoverage (the inline 8-bit counters, PC table and
# comparison tracing that cargo-fuzz itself passes), plus debug assertions and overflow checks. No
# AddressSanitizer (that needs -Zsanitizer): safe Rust does not need it to catch a panic.
#
# Usage: scripts/fuzz.sh [seconds per target, default 30] [target...]
# Each target starts from its committed seeds (<fuzz dir>/seeds/<target>, the fuzz dirs being
# crates/{sip,rtp,srtp,twilio}/fuzz and gateway/fuzz), the RFC 4475/5118 torture messages in
# ../shared/testdata when that folder exists (read in place, not copied), and what earlier runs
# here kept in <fuzz dir>/corpus/<target> (git-ignored). It prints libFuzzer's closing stats line
# per target. A crash, a panic, a timeout or an out-of-memory input fails the run (exit 1) after
# all targets ran, naming the input that libFuzzer saved under <fuzz dir>/artifacts/<target>/;
# replay one with `<binary> <input>`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
shift || true
# crates/srtp/fuzz: unprotect (SRTP/SRTCP receive) and crypto_attribute (SDES lines).
all=(sip:parse_message sip:endpoint sip:sdp rtp:rtp rtp:rtcp rtp:g722 rtp:opus srtp:unprotect srtp:crypto_attribute
    twilio:twiml twilio:api_request gateway:bot_message)
wanted=("$@")

if ! command -v c++ >/dev/null; then
    echo "fuzz: FAILED: no C++ compiler for libFuzzer (run scripts/setup.sh, or apt-get install g++)" >&2
    exit 1
fi
triple=$(rustc -vV | sed -n 's/^host: //p')
# A target dir of its own: these flags would otherwise rebuild everything the workspace build made.
dir=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}/fuzz}
flags="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions -Coverflow-checks"
torture=()
for d in "$root"/../shared/testdata/sip-torture/*/; do
    [ -d "$d" ] && torture+=("$d")
done

# The fuzz crate of a crate name in $all.
fuzz_dir() {
    case $1 in
        gateway) echo "$root/gateway/fuzz" ;;
        *) echo "$root/crates/$1/fuzz" ;;
    esac
}

selected() {
    [ ${#wanted[@]} -eq 0 ] && return 0
    local w
    for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done
    return 1
}

for w in "${wanted[@]}"; do
    case " ${all[*]} " in *":$w "*) ;; *) echo "fuzz: no target '$w' (have: ${all[*]#*:})" >&2; exit 2 ;; esac
done

# --target keeps the instrumentation out of build scripts and proc macros.
for crate in sip rtp srtp twilio gateway; do
    needed=false
    for entry in "${all[@]}"; do
        [ "${entry%%:*}" = "$crate" ] && selected "${entry#*:}" && needed=true
    done
    $needed || continue
    # No committed lock (as cargo-fuzz does): start from the workspace's, so shared dependencies
    # build at the versions the workspace tests use.
    fuzz=$(fuzz_dir "$crate")
    [ -f "$fuzz/Cargo.lock" ] || cp "$root/Cargo.lock" "$fuzz/Cargo.lock"
    echo "fuzz: building ${fuzz#"$root"/} (stable $(rustc -V | cut -d' ' -f2), libFuzzer, SanitizerCoverage)"
    (cd "$fuzz" && env -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="$flags" \
        CARGO_TARGET_DIR="$dir" cargo build --quiet --release --target "$triple" --bins)
done
bin_dir=$dir/$triple/release

failed=()
for entry in "${all[@]}"; do
    crate=${entry%%:*}
    target=${entry#*:}
    selected "$target" || continue
    fuzz=$(fuzz_dir "$crate")
    corpus=$fuzz/corpus/$target
    artifacts=$fuzz/artifacts/$target
    mkdir -p "$corpus" "$artifacts"
    inputs=("$corpus")
    [ -d "$fuzz/seeds/$target" ] && inputs+=("$fuzz/seeds/$target")
    case $target in parse_message | endpoint) inputs+=("${torture[@]}") ;; esac
    log=$fuzz/artifacts/$target.log
    before=$(ls "$artifacts")
    rc=0
    RUST_BACKTRACE=1 "$bin_dir/$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "${inputs[@]}" >"$log" 2>&1 || rc=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $target: ${done_line:-no DONE line} (${runs:-?} runs in ${secs} s)"
    if [ "$rc" -ne 0 ] || [ "$(ls "$artifacts")" != "$before" ]; then
        echo "fuzz: $target FAILED (exit $rc); libFuzzer's report:" >&2
        grep -E -A30 "panicked|==[0-9]+== ERROR|deadly signal|timeout|out-of-memory" "$log" | head -60 >&2 || tail -40 "$log" >&2
        for f in $(grep -o "Test unit written to .*" "$log" | sed 's/Test unit written to //'); do
            echo "fuzz: $target crashing input: $f (replay: $bin_dir/$target $f)" >&2
        done
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (logs: crates/*/fuzz/artifacts/<target>.log, gateway/fuzz/artifacts/<target>.log)" >&2
    exit 1
fi
echo "fuzz: every selected target ran ${secs} s without a crash"
