#!/usr/bin/env bash
# Place one call by hand against a running gateway (or any SIP UAS) and say what happened:
#
#   scripts/call.sh 127.0.0.1:5060                 # speak fixtures/callers/utterance_2.ulaw.wav
#   scripts/call.sh 192.0.2.10:5060 hello.wav      # your own 8 kHz mono WAV (µ-law or 16-bit)
#   LISTEN_S=20 scripts/call.sh 127.0.0.1:5070     # hang up 20 s after starting to speak
#
# The caller is sipp with fixtures/sipp/caller_speaks.xml: INVITE with a PCMU offer, ACK, the
# WAV as RTP (rtp_stream) while it listens, BYE LISTEN_S seconds after its speech started. The
# scenario's placeholders are filled here (@SPEECH@: the WAV, @LISTEN_MS@: LISTEN_S in ms);
# docs/gateway.md, *Trying it by hand*, lists every placeholder of fixtures/sipp. With tshark the
# caller's media port is captured and the reply counted; without it only the signalling is
# reported. An INVITE nothing answers is given up after four retransmissions (about 15 s), not a
# phone's 32.
#
# Environment: LISTEN_S (default 12: the sentence, the turn, the stub's 5 s reply), LOCAL_IP
# (default: the address that routes to the target), SIP_PORT (the caller's SIP port, default: a
# free one), MEDIA_PORT (default: a free even one), TRANSPORT (u1: UDP, the default; t1: TCP).
# Exit status: 0 when the call was answered, a reply heard and the BYE answered; 1 otherwise; 2 on
# bad usage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "$1" in -h|--help) usage ;; esac
target=$1
wav=${2:-$root/fixtures/callers/utterance_2.ulaw.wav}
listen_s=${LISTEN_S:-12}
transport=${TRANSPORT:-u1}
command -v sipp >/dev/null || { echo "call.sh: sipp is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
[ -r "$wav" ] || { echo "call.sh: cannot read $wav" >&2; exit 2; }
case "$listen_s" in ''|*[!0-9]*) echo "call.sh: LISTEN_S must be whole seconds" >&2; exit 2 ;; esac

work=$(mktemp -d)
cap_pid=""
cleanup() {
  [ -n "$cap_pid" ] && kill "$cap_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The target's address, the local address that routes to it, free local ports, and the speech
# as 8 kHz mono µ-law (sipp's rtp_stream plays the WAV's bytes as they are).
addrs=$(python3 - "$target" "${LOCAL_IP:-}" "${SIP_PORT:-}" "${MEDIA_PORT:-}" <<'PY'
import socket, sys
target, local_ip, sip_port, media_port = sys.argv[1:5]
host, _, port = target.rpartition(":")
if not host or not port.isdigit():
    sys.exit(f"call.sh: `{target}` is not HOST:PORT")
host = host.strip("[]")
family = socket.AF_INET6 if ":" in host else socket.AF_INET
try:
    addr = socket.getaddrinfo(host, int(port), family, socket.SOCK_DGRAM)[0][4][0]
except OSError as e:
    sys.exit(f"call.sh: cannot resolve `{host}`: {e}")
if not local_ip:
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.connect((addr, int(port)))
    local_ip = s.getsockname()[0]
def free(even):
    while True:
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.bind((local_ip, 0))
        p = s.getsockname()[1]
        s.close()
        if not even or (p % 2 == 0 and p < 65535):
            return p
print(addr, port, local_ip, sip_port or free(False), media_port or free(True))
PY
) || exit 2
read -r host port local_ip sip_port media_port <<<"$addrs"
speech=$work/speech.wav
python3 - "$wav" "$speech" <<'PY' || exit 2
import struct, sys
src, dst = sys.argv[1:3]
data = open(src, "rb").read()
if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
    sys.exit(f"call.sh: {src} is not a WAV file")
fmt, pcm, i = None, None, 12
while i + 8 <= len(data):
    cid, n = data[i:i + 4], struct.unpack("<I", data[i + 4:i + 8])[0]
    if cid == b"fmt ":
        fmt = struct.unpack("<HHIIHH", data[i + 8:i + 24])
    elif cid == b"data":
        pcm = data[i + 8:i + 8 + n]
    i += 8 + n + (n & 1)
if fmt is None or pcm is None:
    sys.exit(f"call.sh: {src} has no fmt or data chunk")
codec, channels, rate, _, _, bits = fmt
if channels != 1 or rate != 8000:
    sys.exit(f"call.sh: {src} is {channels} channel(s) at {rate} Hz; make it 8 kHz mono, "
             f"e.g. sox {src} -r 8000 -c 1 -e mu-law out.wav")
if codec == 7 and bits == 8:
    ulaw = pcm
elif codec == 1 and bits == 16:
    # G.711 µ-law encoding (ITU-T G.711, with the usual bias of 0x84 and clip at 32635).
    def enc(x):
        sign = 0x80 if x < 0 else 0
        x = min(abs(x), 32635) + 0x84
        exp = max(0, x.bit_length() - 8)
        return ~(sign | (exp << 4) | ((x >> (exp + 3)) & 0x0F)) & 0xFF
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm[: len(pcm) // 2 * 2])
    ulaw = bytes(enc(s) for s in samples)
else:
    sys.exit(f"call.sh: {src} is neither µ-law nor 16-bit PCM (format {codec}, {bits} bits)")
fmt_chunk = struct.pack("<4sIHHIIHHH", b"fmt ", 18, 7, 1, 8000, 8000, 1, 8, 0)
body = b"WAVE" + fmt_chunk + struct.pack("<4sI", b"data", len(ulaw)) + ulaw
open(dst, "wb").write(b"RIFF" + struct.pack("<I", len(body)) + body)
PY
speech_s=$(python3 -c 'import sys,os; print(f"{(os.path.getsize(sys.argv[1]) - 46) / 8000:.1f}")' "$speech")
sed -e "s|@SPEECH@|$speech|" -e "s|@LISTEN_MS@|$((listen_s * 1000))|" \
  "$root/fixtures/sipp/caller_speaks.xml" >"$work/caller.xml"

if command -v tshark >/dev/null; then
  iface=any
  case "$local_ip" in 127.*|::1) iface=lo ;; esac
  tshark -i "$iface" -f "udp port $media_port" -w "$work/call.pcap" -F pcap -q 2>"$work/tshark.err" &
  cap_pid=$!
  for _ in $(seq 1 50); do grep -q "Capturing on" "$work/tshark.err" 2>/dev/null && break; sleep 0.1; done
fi

echo "calling sip:bot@$host:$port from $local_ip:$sip_port (media port $media_port), saying ${speech_s} s of $(basename "$wav"), listening ${listen_s} s"
echo "\$ sipp $host:$port -sf fixtures/sipp/caller_speaks.xml -t $transport -m 1 -i $local_ip -p $sip_port -mi $local_ip -mp $media_port"
set +e
sipp "$host:$port" -sf "$work/caller.xml" -t "$transport" -m 1 -l 1 \
  -i "$local_ip" -p "$sip_port" -mi "$local_ip" -mp "$media_port" \
  -timeout "$((listen_s + 30))s" -timeout_error -max_retrans 4 -nostdin \
  -trace_msg -message_file "$work/messages.log" -trace_err -error_file "$work/errors.log" \
  >"$work/sipp.out" 2>&1
sipp_status=$?
set -e
if [ -n "$cap_pid" ]; then
  sleep 0.5
  kill -INT "$cap_pid" 2>/dev/null || true
  wait "$cap_pid" 2>/dev/null || true
  cap_pid=""
  tshark -r "$work/call.pcap" -d "udp.port==$media_port,rtp" -Y rtp -T fields \
    -e frame.time_epoch -e udp.srcport -e udp.dstport -e rtp.payload >"$work/rtp.tsv" 2>/dev/null || true
fi

# What the messages say: the INVITE's final answer, who hung up; then what the RTP says.
python3 - "$work/messages.log" "$work/rtp.tsv" "$media_port" "$sipp_status" "$speech" <<'PY'
import os, re, struct, sys
log, tsv, media_port, sipp_status, speech = sys.argv[1:6]
text = open(log, errors="replace").read() if os.path.exists(log) else ""
# sipp's message log: a header line per message, then the message.
received = re.findall(r"received \[\d+\] bytes.*?\n\n(.*?)(?=\n-{5,}|\Z)", text, re.S)
firsts = [m.strip().splitlines()[0] for m in received if m.strip()]
def cseq(m):
    hit = re.search(r"^CSeq:\s*\d+\s+(\w+)", m, re.M | re.I)
    return hit.group(1).upper() if hit else ""
finals = [(m.strip().splitlines()[0], m) for m in received
          if m.strip().startswith("SIP/2.0 ") and not m.strip().startswith("SIP/2.0 1")
          and cseq(m) == "INVITE"]
ok = True
if not firsts:
    ok = False
    print("answered:   no — nothing came back. A gateway drops SIP from outside its trunk networks "
          "without a word (--trunk-cidr, default loopback only; --untrusted-sip reject answers 403); "
          "check the address, the port and the firewall too.")
elif not finals:
    ok = False
    print(f"answered:   no — only {', '.join(sorted(set(firsts)))} came back")
else:
    status, message = finals[0]
    if status.startswith("SIP/2.0 2"):
        print(f"answered:   yes ({status[8:]})")
    else:
        ok = False
        extra = [l.strip() for l in message.splitlines()
                 if re.match(r"(Retry-After|Warning|Reason):", l.strip(), re.I)]
        print(f"answered:   no — refused with {status[8:]}" + (f" ({'; '.join(extra)})" if extra else ""))
if any(f.startswith("BYE ") for f in firsts):
    bye = next(m for m in received if m.strip().startswith("BYE "))
    reason = next((l.strip() for l in bye.splitlines() if l.lower().startswith("reason:")), "no Reason header")
    print(f"hung up:    by the far end first ({reason})")
elif finals and finals[0][0].startswith("SIP/2.0 2"):
    bye_ok = any(s.startswith("SIP/2.0 200") and cseq(m) == "BYE" for s, m in
                 [(m.strip().splitlines()[0], m) for m in received if m.strip()])
    print("hung up:    by us after listening" + (" (BYE answered 200)" if bye_ok else " (BYE not answered)"))
    if not bye_ok:
        ok = False
def ulaw(b):
    b = ~b & 0xFF
    t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4)
    return (0x84 - t) if b & 0x80 else (t - 0x84)
def voiced(payload):
    # Voiced: any sample at 64 of 32767 or louder (about -54 dBFS), as scripts/demo.sh.
    return any(abs(ulaw(x)) >= 64 for x in bytes.fromhex(payload.replace(":", "")))
answered = bool(finals) and finals[0][0].startswith("SIP/2.0 2")
if not answered:
    pass
elif not os.path.exists(tsv):
    print("reply:      not measured (install tshark to hear what came back)")
else:
    rows = [l.rstrip("\n").split("\t") for l in open(tsv) if l.count("\t") >= 3]
    sent = [float(t) for t, s, d, p in rows if s == media_port]
    heard = [(float(t), voiced(p)) for t, s, d, p in rows if d == media_port]
    loud = [t for t, v in heard if v]
    print(f"caller:     sent {len(sent)} RTP packets")
    if not heard:
        ok = False
        print("reply:      no RTP came back to the caller")
    elif not loud:
        ok = False
        print(f"reply:      {len(heard)} RTP packets came back, all silence")
    else:
        # The caller's speech ends with the WAV's last voiced 20 ms frame.
        wav = open(speech, "rb").read()[46:]
        frames = [wav[k:k + 160] for k in range(0, len(wav) - len(wav) % 160, 160)]
        last = max((k for k, f in enumerate(frames) if voiced(f.hex())), default=len(frames) - 1)
        end = sent[min(last, len(sent) - 1)] if sent else loud[0]
        after = [t for t in loud if t > end]
        times = [t for t, _ in heard if t >= loud[0]]
        gap = max((b - a for a, b in zip(times, times[1:])), default=0.0)
        print(f"reply:      {len(heard)} RTP packets came back, {len(loud)} of them voiced "
              f"({loud[-1] - loud[0]:.1f} s from first to last voiced)")
        if after:
            print(f"turn:       first voiced reply {1000 * (after[0] - end):.0f} ms after the caller's speech ended")
        print(f"largest gap {1000 * gap:.1f} ms between reply packets (a caller hears a hole above ~40)")
if sipp_status != "0" and ok:
    ok = False
if not ok:
    print(f"sipp exit status {sipp_status}")
sys.exit(0 if ok else 1)
PY
