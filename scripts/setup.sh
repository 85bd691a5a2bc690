#!/usr/bin/env bash
# Install what the tests and the demo need, when missing: Debian packages (sipp, tshark, espeak-ng, sox,
# baresip, linphone-cli, kamailio, libspandsp2, cmake for libopus), the ONNX Runtime library and models (scripts/fetch-models.sh), Python onnxruntime + numpy for
# the independent reference checks, and cargo-deny. Safe to run again; it skips what is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need_apt=()
command -v sipp >/dev/null || need_apt+=(sip-tester)
command -v tshark >/dev/null || need_apt+=(tshark)
command -v espeak-ng >/dev/null || need_apt+=(espeak-ng)
command -v sox >/dev/null || need_apt+=(sox)
command -v baresip >/dev/null || need_apt+=(baresip)
# gateway/tests/tls_srtp_interop.rs: linphonec calls over TLS with SRTP.
command -v linphonec >/dev/null || need_apt+=(linphone-cli)
command -v kamailio >/dev/null || need_apt+=(kamailio)
# The TLS tests make their throwaway certificates with the openssl command (the build itself
# needs no OpenSSL: TLS is rustls).
command -v openssl >/dev/null || need_apt+=(openssl)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# crates/rtp/tests/g722_spandsp.rs: our G.722 against spandsp's, an independent implementation.
[ -e /usr/lib/x86_64-linux-gnu/libspandsp.so.2 ] || [ -e /usr/lib/aarch64-linux-gnu/libspandsp.so.2 ] \
  || need_apt+=(libspandsp2)
# scripts/fuzz.sh: libfuzzer-sys compiles libFuzzer from its C++ source.
command -v c++ >/dev/null || need_apt+=(g++)
# gateway/tests/wideband_call.rs drops a share of a call's packets on loopback with tc (its
# test skips with a reason without it).
command -v tc >/dev/null || need_apt+=(iproute2)
# The build itself: the opus crate compiles its bundled libopus with CMake.
command -v cmake >/dev/null || need_apt+=(cmake)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: not root; install these yourself for the full suite: ${need_apt[*]}" >&2
  fi
fi
"$root/scripts/fetch-models.sh"
python3 -c 'import onnxruntime, numpy' 2>/dev/null \
  || python3 -m pip install --quiet --disable-pip-version-check "onnxruntime==1.31.1" "numpy<3"
command -v cargo-deny >/dev/null || cargo install --locked --quiet cargo-deny
# pipecat: a venv with pipecat-ai 1.14 for the real-bot tests (gateway/tests/pipecat_bot.rs), the
# ontime_pipecat package's own tests and scripts/pipecat_cpu.py. Extras: `websocket` (FastAPI for
# FastAPIWebsocketTransport) and `silero` (nothing extra in 1.14: the Silero ONNX model and
# onnxruntime ship in pipecat-ai itself, as does Smart Turn v3's smart-turn-v3.2-cpu.onnx, so no
# model is downloaded; `local-smart-turn` would pull torch for the v2 model and is not needed).
# ontime_pipecat itself is not installed: the bot and tests put integrations/pipecat/src on the path.
pipecat_venv="$root/.cache/pipecat-venv"
pipecat_ok() {
  "$pipecat_venv/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
assert m.version("pipecat-ai").startswith("1.14."), m.version("pipecat-ai")
import fastapi, uvicorn, pytest, soxr, onnxruntime  # noqa: F401
import pipecat.serializers.twilio, pipecat.transports.websocket.fastapi  # noqa: F401
PY
}
if ! pipecat_ok; then
  rm -rf "$pipecat_venv"
  python3 -m venv "$pipecat_venv"
  "$pipecat_venv/bin/pip" install --quiet --disable-pip-version-check \
    "pipecat-ai[websocket,silero]==1.14.0" "uvicorn>=0.32,<1" "fastapi>=0.115.6,<1" "pytest>=8,<10"
  pipecat_ok || { echo "setup: the pipecat venv at $pipecat_venv does not import" >&2; exit 1; }
fi
# twilio (the helper library): its RequestValidator checks the gateway's signed status callbacks
# in gateway/tests/call_control.rs, as a bot's own webhook handler would. Added to an existing venv
# without rebuilding it.
"$pipecat_venv/bin/python" -c 'import twilio.request_validator' 2>/dev/null \
  || "$pipecat_venv/bin/pip" install --quiet --disable-pip-version-check "twilio>=9.13,<10"
