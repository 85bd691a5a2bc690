#!/usr/bin/env bash
# Runs the ontime-sip fuzz targets (parse_message, endpoint, sdp) for a bounded time each (default
# 30 s) on the pinned stable toolchain; scripts/fuzz.sh builds and runs them and fails on a crash.
# Usage: crates/sip/fuzz/run.sh [seconds]   (scripts/fuzz.sh [seconds] runs the RTP targets too)
set -euo pipefail
exec "$(dirname "$0")/../../../scripts/fuzz.sh" "${1:-30}" parse_message endpoint sdp
