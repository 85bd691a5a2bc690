#!/usr/bin/env bash
# Install what the tests and the demo need, when missing: Debian packages (sipp, tshark, espeak-ng, sox,
# baresip, kamailio), the ONNX Runtime library and models (scripts/fetch-models.sh), Python onnxruntime + numpy for
# the independent reference checks, and cargo-deny. Safe to run again; it skips what is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
need_apt=()
command -v sipp >/dev/null || need_apt+=(sip-tester)
command -v tshark >/dev/null || need_apt+=(tshark)
command -v espeak-ng >/dev/null || need_apt+=(espeak-ng)
command -v sox >/dev/null || need_apt+=(sox)
command -v baresip >/dev/null || need_apt+=(baresip)
command -v kamailio >/dev/null || need_apt+=(kamailio)
# native-tls (wss:// agents) builds against the system OpenSSL.
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# scripts/fuzz.sh: libfuzzer-sys compiles libFuzzer from its C++ source.
command -v c++ >/dev/null || need_apt+=(g++)
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
