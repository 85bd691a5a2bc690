#!/usr/bin/env bash
# `make demo`: start ontime-gateway on loopback with the built-in stub agent, place one call through
# it with sipp (a caller speaking a committed espeak-ng sentence), capture the caller's RTP with
# tshark, and print what the caller heard: turn latency, reply length, the largest gap between
# reply packets, the sender's late ticks, and the gateway's call record.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh >/dev/null
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$root/.cache/models/libonnxruntime.so.1.31.1}
export ONTIME_MODELS_DIR=${ONTIME_MODELS_DIR:-$root/.cache/models}
cargo build --release -q -p ontime-gateway
bin=${CARGO_TARGET_DIR:-$root/target}/release/ontime-gateway

sip_port=${DEMO_SIP_PORT:-5060}
metrics_port=${DEMO_METRICS_PORT:-9464}
media_port=${DEMO_MEDIA_PORT:-6000}
work=$(mktemp -d)
gw_pid=""; cap_pid=""
cleanup() {
  [ -n "$cap_pid" ] && kill "$cap_pid" 2>/dev/null || true
  [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== ontime demo: one call through the gateway"
echo "\$ $bin --sip-listen 127.0.0.1:$sip_port --metrics-listen 127.0.0.1:$metrics_port"
"$bin" --sip-listen "127.0.0.1:$sip_port" --metrics-listen "127.0.0.1:$metrics_port" --log-format json \
  >"$work/gateway.log" 2>"$work/gateway.err" &
gw_pid=$!
for _ in $(seq 1 100); do
  curl -fs "127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1 && break
  kill -0 "$gw_pid" 2>/dev/null || { cat "$work/gateway.err"; exit 1; }
  sleep 0.1
done

tshark -i lo -f "udp port $media_port" -w "$work/call.pcap" -F pcap -q 2>"$work/tshark.err" &
cap_pid=$!
for _ in $(seq 1 50); do grep -q "Capturing on" "$work/tshark.err" 2>/dev/null && break; sleep 0.1; done

speech=$root/fixtures/callers/utterance_2.ulaw.wav
sed -e "s|@SPEECH@|$speech|" -e "s|@LISTEN_MS@|12000|" fixtures/sipp/caller_speaks.xml >"$work/caller.xml"
echo "\$ sipp 127.0.0.1:$sip_port -sf fixtures/sipp/caller_speaks.xml -m 1   # caller says: \"Can you tell me when the store opens tomorrow morning?\""
sipp "127.0.0.1:$sip_port" -sf "$work/caller.xml" -m 1 -l 1 -i 127.0.0.1 -p 5099 -mi 127.0.0.1 -mp "$media_port" \
  -timeout 40s -timeout_error -nostdin -trace_err -error_file "$work/sipp.err" >"$work/sipp.out" 2>&1 \
  || { echo "sipp failed:"; tail -20 "$work/sipp.out"; cat "$work/sipp.err" 2>/dev/null; exit 1; }
sleep 0.5
kill -INT "$cap_pid"; wait "$cap_pid" 2>/dev/null || true; cap_pid=""

tshark -r "$work/call.pcap" -d "udp.port==$media_port,rtp" -Y rtp -T fields \
  -e frame.time_epoch -e udp.srcport -e udp.dstport -e rtp.payload >"$work/rtp.tsv" 2>/dev/null
metrics=$(curl -fs "127.0.0.1:$metrics_port/metrics")
python3 - "$work/rtp.tsv" "$media_port" "$speech" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.count("\t") >= 3]
port = sys.argv[2]
def ulaw(b):
    # G.711 mu-law decode (ITU-T G.711 table formula).
    b = ~b & 0xFF
    t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4)
    return (0x84 - t) if b & 0x80 else (t - 0x84)
def silent(p):
    # The load harness's definition (crates/loadgen/src/audio.rs, SILENCE_THRESHOLD): a frame
    # is voiced when any sample reaches 64 of 32767 (about -54 dBFS), so both tools measure
    # the same turn latency: the caller's last voiced packet -> the first voiced reply packet.
    h = bytes.fromhex(p.replace(":", ""))
    return not any(abs(ulaw(x)) >= 64 for x in h)
caller = [(float(t), silent(p)) for t, s, d, p in rows if s == port]
agent = [(float(t), silent(p)) for t, s, d, p in rows if d == port]
# The caller's speech ends with the last voiced 20 ms frame of the file it plays (the harness
# measures from the frames it sends the same way). Counted in the file, not on the wire: sipp's
# rtp_stream fills its last, partial packet with 0x00 bytes — full-scale µ-law — and that one
# loud packet 0.36 s after the speech would otherwise count as speech.
import struct
wav = open(sys.argv[3], "rb").read()
i, data = 12, b""
while i + 8 <= len(wav):
    cid, n = wav[i:i + 4], struct.unpack("<I", wav[i + 4:i + 8])[0]
    if cid == b"data":
        data = wav[i + 8:i + 8 + n]
        break
    i += 8 + n + (n & 1)
frames = [data[k:k + 160] for k in range(0, len(data) - len(data) % 160, 160)]
last_voiced = max((k for k, f in enumerate(frames) if any(abs(ulaw(x)) >= 64 for x in f)), default=None)
speech = [t for t, q in caller[: (last_voiced + 1) if last_voiced is not None else 0] if not q]
reply = [t for t, q in agent if not q]
if not speech or not reply:
    print("the caller heard no reply"); sys.exit(1)
gaps = [b - a for a, b in zip([t for t, _ in agent if t >= reply[0]], [t for t, _ in agent if t >= reply[0]][1:])]
print(f"caller spoke      {len(speech)} packets ({speech[-1]-speech[0]:.1f} s)")
print(f"turn latency      {(reply[0]-speech[-1])*1e3:.0f} ms (caller's last voiced packet -> first voiced reply packet, as ontime-load measures it)")
print(f"caller heard      {len(reply)} reply packets ({reply[-1]-reply[0]:.1f} s of the stub's sentence)")
print(f"largest gap       {max(gaps)*1e3:.1f} ms between consecutive packets after the reply began (late if > 40)")
PY
late=$(printf '%s\n' "$metrics" | awk '$1=="ontime_sender_late_ticks_total"{print $2}')
ticks=$(printf '%s\n' "$metrics" | awk '$1=="ontime_sender_ticks_total"{print $2}')
rt=$(printf '%s\n' "$metrics" | awk '$1=="ontime_sender_realtime"{print $2}')
echo "sender            ${late:-?} late ticks of ${ticks:-?} (SCHED_FIFO: ${rt:-?})"
# The log line carries the record as an escaped JSON string: print the record itself.
echo "call record       $(grep -o '"cdr":"[^}]*}' "$work/gateway.log" | tail -1 | sed 's/^"cdr":"//; s/\\"/"/g')"
kill -TERM "$gw_pid"; wait "$gw_pid"; status=$?; gw_pid=""
echo "gateway stopped on SIGTERM with exit status $status"
