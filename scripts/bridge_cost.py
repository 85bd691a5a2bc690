#!/usr/bin/env python3
"""What a bridged `<Dial>` call costs the gateway, next to a call answered by the stub agent.

Starts the release gateway twice on loopback. The first time every inbound call runs
`<Dial><Sip>…</Sip></Dial>` to a sipp callee standing for the trunk (it answers and talks),
so each call is two legs bridged through the real-time sender. The second time the same
callers reach the stub agent (VAD, Smart Turn, its canned reply). N sipp callers talk for the
whole window in both runs. The gateway's CPU time (utime + stime from /proc) is read over a
steady window while all N calls are up, and printed as % of one core per call.

    cargo build --release -p ontime-gateway
    python3 scripts/bridge_cost.py [--calls 1,4,8] [--window 20]

Needs sipp and sox. Standard library only. The figures belong in docs/capacity.md with the
command, the machine and the date.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")


def free_port(kind=socket.SOCK_DGRAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scenario(name, reps, tmp):
    with open(os.path.join(ROOT, "fixtures/sipp", name)) as f:
        text = f.read()
    for k, v in reps.items():
        text = text.replace(k, v)
    path = os.path.join(tmp, f"{len(os.listdir(tmp))}-{name}")
    with open(path, "w") as f:
        f.write(text)
    return path


def long_speech(tmp, seconds):
    """The fixture callers' utterances, repeated to `seconds` (8 kHz µ-law WAV)."""
    parts = sorted(
        os.path.join(ROOT, "fixtures/callers", f)
        for f in os.listdir(os.path.join(ROOT, "fixtures/callers"))
        if f.endswith(".ulaw.wav")
    )
    one = os.path.join(tmp, "one.wav")
    subprocess.run(["sox", *parts, "-e", "mu-law", one], check=True)
    out = os.path.join(tmp, "long.wav")
    subprocess.run(["sox", one, "-e", "mu-law", out, "repeat", "12", "trim", "0", str(seconds)],
                   check=True)
    return out


def start_gateway(binary, sip, metrics, extra, tmp):
    log = open(os.path.join(tmp, f"gw-{sip}.log"), "w")
    env = dict(os.environ)
    models = os.path.join(ROOT, ".cache/models")
    env.setdefault("ORT_DYLIB_PATH", os.path.join(models, "libonnxruntime.so.1.31.1"))
    env.setdefault("ONTIME_MODELS_DIR", models)
    env["ONTIME_ADMISSION_RESERVE"] = "0"
    rtp = free_port()
    gw = subprocess.Popen(
        [binary, "--sip-listen", f"127.0.0.1:{sip}", "--metrics-listen", f"127.0.0.1:{metrics}",
         "--rtp-ports", f"{rtp}-{rtp + 200}", *extra],
        stdout=log, stderr=log, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", metrics), timeout=1) as s:
                s.sendall(b"GET /readyz HTTP/1.0\r\n\r\n")
                if b" 200 " in s.recv(100):
                    return gw
        except OSError:
            pass
        time.sleep(0.2)
    gw.kill()
    sys.exit("the gateway did not get ready")


def metric(metrics, name):
    with socket.create_connection(("127.0.0.1", metrics), timeout=2) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := s.recv(65536):
            body += chunk
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and name.endswith("}"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sipp(args, tmp, label):
    log = open(os.path.join(tmp, f"sipp-{label}.log"), "w")
    return subprocess.Popen(["sipp", *args, "-nostdin", "-timeout", "120s"],
                            stdout=log, stderr=log)


def run(binary, n, window, bridged, speech, tmp):
    sip, metrics = free_port(), free_port(socket.SOCK_STREAM)
    procs = []
    extra = []
    if bridged:
        trunk = free_port()
        twiml = os.path.join(tmp, f"dial-{trunk}.xml")
        with open(twiml, "w") as f:
            f.write(f"<Response><Dial><Sip>sip:desk@127.0.0.1:{trunk}</Sip></Dial></Response>")
        extra = ["--trunk-uri", f"sip:127.0.0.1:{trunk}", "--voice-twiml", twiml]
        callee = scenario("callee_bridged.xml", {
            "@RURI_RE@": "^INVITE sip:desk@", "@SPEECH@": speech,
            "@LISTEN_MS@": str(int((window + 15) * 1000))}, tmp)
        procs.append(sipp(["-sf", callee, "-m", str(n), "-i", "127.0.0.1", "-p", str(trunk),
                           "-mi", "127.0.0.1", "-mp", str(free_port() & ~1)], tmp, "callee"))
        time.sleep(0.5)
    gw = start_gateway(binary, sip, metrics, extra, tmp)
    try:
        caller = scenario("caller_speaks_waits_bye.xml", {
            "@SPEECH@": speech, "@BYE_WITHIN_MS@": "120000", "@REASON@": "."}, tmp)
        for i in range(n):
            procs.append(sipp(["-sf", caller, "-m", "1", "-i", "127.0.0.1",
                               "-mi", "127.0.0.1", "-mp", str(free_port() & ~1),
                               f"127.0.0.1:{sip}"], tmp, f"caller-{i}"))
        time.sleep(5)  # every call answered (and bridged), past its set-up
        before, t0 = cpu_seconds(gw.pid), time.time()
        time.sleep(window)
        used, took = cpu_seconds(gw.pid) - before, time.time() - t0
        # Every call up through the window: N answered (and N legs bridged), none ended.
        up = metric(metrics, "ontime_calls_active")
        legs = metric(metrics, 'ontime_outbound_calls_total{result="answered"}')
        want = (2 * n, n) if bridged else (n, 0)
        if (up, legs) != want:
            sys.exit(f"{n} {'bridged' if bridged else 'stub'} calls: {up} calls up, {legs} legs "
                     f"answered; expected {want}")
        return 100.0 * used / took
    finally:
        for p in procs:
            p.kill()
        gw.terminate()
        try:
            gw.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gw.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", default="1,4,8")
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ontime-gateway"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ontime-bridge-cost-") as tmp:
        speech = long_speech(tmp, a.window + 30)
        print("calls | bridged: % of a core | per call | stub agent: % of a core | per call")
        for n in [int(x) for x in a.calls.split(",")]:
            bridged = run(a.binary, n, a.window, True, speech, tmp)
            stub = run(a.binary, n, a.window, False, speech, tmp)
            print(f"{n} | {bridged:.2f} | {bridged / n:.2f} | {stub:.2f} | {stub / n:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
