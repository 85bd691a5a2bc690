#!/usr/bin/env bash
# The Dockerfile's build steps as a script, so they run (and are tested) without a Docker engine.
#   deploy/docker/stage.sh DESTDIR
# lays out the runtime image's files under DESTDIR:
#   usr/local/bin/ontime-gateway     the release binary (cargo build --release --locked), or the
#                                    binary named by ONTIME_GATEWAY_BIN when it is built already;
#   usr/local/bin/ontime-gateway-rt  the same binary, given cap_sys_nice=ep when setcap exists (the
#                                    Dockerfile installs it); used only with realtime.enabled;
#   opt/ontime/models/               ONNX Runtime and the two models, by scripts/fetch-models.sh
#                                    (SHA-256 checked), or copied from ONTIME_MODELS_FROM.
# Then it runs the staged binary the way the image does (`--version`, and as an unprivileged user
# with the staged models until /readyz answers, when SMOKE=1).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:?usage: stage.sh DESTDIR}
mkdir -p "$dest/usr/local/bin" "$dest/opt/ontime/models"
dest=$(cd "$dest" && pwd)

bin=${ONTIME_GATEWAY_BIN:-}
if [ -z "$bin" ]; then
  (cd "$root" && cargo build --release --locked -p ontime-gateway)
  bin=${CARGO_TARGET_DIR:-$root/target}/release/ontime-gateway
fi
install -m 0755 "$bin" "$dest/usr/local/bin/ontime-gateway"
install -m 0755 "$bin" "$dest/usr/local/bin/ontime-gateway-rt"
if command -v setcap >/dev/null; then
  # A file capability: SCHED_FIFO for the sender without running as root. exec fails with EPERM
  # unless the container grants SYS_NICE, which is why the plain binary stays the default.
  setcap cap_sys_nice=ep "$dest/usr/local/bin/ontime-gateway-rt"
fi

models=$dest/opt/ontime/models
if [ -n "${ONTIME_MODELS_FROM:-}" ]; then
  cp "$ONTIME_MODELS_FROM"/libonnxruntime.so.1.31.1 "$ONTIME_MODELS_FROM"/silero_vad.onnx \
    "$ONTIME_MODELS_FROM"/smart-turn-v3.2-cpu.onnx "$models/"
fi
# Fetches what is missing and checks the SHA-256 of the models either way.
ONTIME_MODELS_DIR=$models "$root/scripts/fetch-models.sh" >/dev/null
chmod 0644 "$models"/*

"$dest/usr/local/bin/ontime-gateway" --version
# Every shared library the binary and ONNX Runtime need must be in the runtime base image
# (debian:bookworm-slim: glibc, libgcc_s, libstdc++).
for f in "$dest/usr/local/bin/ontime-gateway" "$models/libonnxruntime.so.1.31.1"; do
  if ldd "$f" | grep -q 'not found'; then
    ldd "$f" >&2
    echo "stage: $f needs a library that is not installed" >&2
    exit 1
  fi
done

if [ "${SMOKE:-0}" = 1 ]; then
  # As the image runs it: an unprivileged user, models and library from the staged tree.
  run=(env ORT_DYLIB_PATH="$models/libonnxruntime.so.1.31.1" ONTIME_MODELS_DIR="$models"
    ONTIME_SIP_LISTEN=127.0.0.1:0 ONTIME_METRICS_LISTEN=127.0.0.1:${SMOKE_METRICS_PORT:-19464}
    ONTIME_RTP_PORTS=${SMOKE_RTP_PORTS:-41000-41019} "$dest/usr/local/bin/ontime-gateway")
  if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    run=(setpriv --reuid=65534 --regid=65534 --clear-groups "${run[@]}")
  fi
  "${run[@]}" >"$dest/smoke.log" 2>&1 &
  pid=$!
  ok=0
  for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:${SMOKE_METRICS_PORT:-19464}/readyz" >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.2
  done
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" || true
  if [ "$ok" != 1 ]; then cat "$dest/smoke.log" >&2; echo "stage: smoke run never became ready" >&2; exit 1; fi
  rm -f "$dest/smoke.log"
  echo "stage: the staged gateway ran as an unprivileged user and answered /readyz"
fi
echo "stage: runtime tree ready in $dest"
