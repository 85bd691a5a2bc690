#!/usr/bin/env bash
# Soak (or churn) the gateway with `ontime-load --soak` (docs/reliability.md, "Soak and churn"):
# builds the release binaries, keeps CALLS calls up for DURATION with the gateway on a dedicated
# core, and writes the samples (JSON lines), the summary (text and JSON) and the progress log
# under target/soak/<stamp>-<mode>-<calls>/. Not part of `make test`.
#
#   scripts/soak.sh [CALLS] [DURATION] [--churn] [more ontime-load flags]
#   scripts/soak.sh                 # 48 calls for 1 h
#   scripts/soak.sh 48 10m --churn  # the gateway's admission limit at 48, callers beyond it
#
# Environment: CORE (the gateway's core, default 1; "none": shared with the harness),
# SAMPLE_INTERVAL (default 10s), CARGO_TARGET_DIR (where the binaries are built), GATEWAY (a
# gateway binary to soak instead of building this checkout's).
# Every process it starts is stopped on exit, Ctrl-C or SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."

calls=48
duration=1h
mode=soak
flags=()
positional=0
for arg in "$@"; do
    case "$arg" in
        --churn) mode=churn; flags+=(--churn) ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        -*) flags+=("$arg") ;;
        *)
            case $positional in
                0) calls=$arg ;;
                1) duration=$arg ;;
                *) flags+=("$arg") ;;
            esac
            positional=$((positional + 1)) ;;
    esac
done
[[ $calls =~ ^[0-9]+$ && $calls -gt 0 ]] || { echo "soak.sh: CALLS must be a positive number, not '$calls'" >&2; exit 2; }

target=${CARGO_TARGET_DIR:-target}
load="$target/release/ontime-load"
if [[ -n ${GATEWAY:-} ]]; then
    # A gateway binary built elsewhere (another commit): only the harness is built here.
    gateway=$GATEWAY
    cargo build --release -p ontime-loadgen
else
    gateway="$target/release/ontime-gateway"
    cargo build --release -p ontime-gateway -p ontime-loadgen
fi

core=${CORE:-1}
placement=()
if [[ $core != none ]]; then
    if (( $(nproc --all) < 2 )); then
        echo "soak.sh: one CPU only: the gateway shares it with the harness" >&2
    else
        placement=(--cpuset "$core")
    fi
fi

out="target/soak/$(date -u +%Y%m%dT%H%M%SZ)-$mode-$calls"
mkdir -p "$out"
{
    echo "started_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "gateway: $gateway ($("$gateway" --version 2>/dev/null || echo 'no --version'))"
    echo "machine: $(nproc --all) CPUs, $(uname -sr), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "uptime before: $(uptime)"
} > "$out/run.txt"

pid=""
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
        # ontime-load's own children (the gateway), to be sure none outlives it.
        local kids
        kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
        # SIGTERM: ontime-load hangs up, writes its summary and stops the gateway it spawned.
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        for kid in $kids; do
            kill -KILL "$kid" 2>/dev/null || true
        done
    fi
    echo "uptime after: $(uptime)" >> "$out/run.txt"
    echo "results in $out" >&2
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command=("$load" --gateway "$gateway" "${placement[@]}" --soak --calls "$calls"
    --duration "$duration" --sample-interval "${SAMPLE_INTERVAL:-10s}"
    --samples "$out/samples.jsonl" --json "$out/summary.json" "${flags[@]}")
echo "command: ${command[*]}" >> "$out/run.txt"
echo "soak.sh: ${command[*]}" >&2
echo "soak.sh: progress in $out/progress.log" >&2
"${command[@]}" > "$out/summary.txt" 2> "$out/progress.log" &
pid=$!
set +e
wait "$pid"
status=$?
set -e
pid=""
cat "$out/summary.txt"
exit "$status"
