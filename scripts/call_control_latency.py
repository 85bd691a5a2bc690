#!/usr/bin/env python3
"""How long the call-control API takes to act on a call: from the HTTP request to the first
RFC 4733 packet of `<Play digits>` reaching the caller, and from `Status=completed` to the BYE
reaching the caller. Starts its own gateway (the release binary), places CALLS calls one after
another as a raw SIP/RTP caller on loopback, and prints the median and the maximum of each.

    cargo build --release -p ontime-gateway
    python3 scripts/call_control_latency.py [--calls 20]

Standard library only. The figures belong in docs/call-control.md with the machine and date.
"""

import argparse
import base64
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCOUNT = "AC" + "0123456789abcdef" * 2
TOKEN = "latency-" + "%08x" % random.getrandbits(32)


def free_port(kind=socket.SOCK_DGRAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def api(api_addr, method, path, form=None):
    url = "http://%s/2010-04-01/Accounts/%s/%s" % (api_addr, ACCOUNT, path)
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    auth = base64.b64encode(("%s:%s" % (ACCOUNT, TOKEN)).encode()).decode()
    req.add_header("Authorization", "Basic " + auth)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read().decode()


def invite(sip, gw, rtp_port, call_id, tag):
    local = "127.0.0.1:%d" % sip.getsockname()[1]
    sdp = (
        "v=0\r\no=caller 1 1 IN IP4 127.0.0.1\r\ns=latency\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        "m=audio %d RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\n"
        "a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-15\r\na=ptime:20\r\n" % rtp_port
    )
    msg = (
        "INVITE sip:bot@%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK%s\r\n"
        "From: <sip:caller@%s>;tag=%s\r\nTo: <sip:bot@%s>\r\nCall-ID: %s\r\nCSeq: 1 INVITE\r\n"
        "Contact: <sip:caller@%s>\r\nMax-Forwards: 70\r\nContent-Type: application/sdp\r\n"
        "Content-Length: %d\r\n\r\n%s"
        % (gw, local, call_id, local, tag, gw, call_id, local, len(sdp), sdp)
    )
    sip.sendto(msg.encode(), parse_addr(gw))
    deadline = time.time() + 10
    while time.time() < deadline:
        data, _ = sip.recvfrom(65535)
        text = data.decode(errors="replace")
        if text.startswith("SIP/2.0 200"):
            to = re.search(r"^To: (.*)$", text, re.M | re.I).group(1).strip()
            ack = (
                "ACK sip:bot@%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK%sa\r\n"
                "From: <sip:caller@%s>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: 1 ACK\r\n"
                "Max-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
                % (gw, local, call_id, local, tag, to, call_id)
            )
            sip.sendto(ack.encode(), parse_addr(gw))
            return
        if re.match(r"SIP/2.0 [3-6]", text):
            raise RuntimeError("call refused: " + text.splitlines()[0])
    raise RuntimeError("no answer")


def parse_addr(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


def wait_bye(sip, t0):
    sip.settimeout(10)
    while True:
        data, src = sip.recvfrom(65535)
        text = data.decode(errors="replace")
        if text.startswith("BYE "):
            at = time.perf_counter() - t0
            lines = [l for l in text.split("\r\n") if re.match(r"(Via|From|To|Call-ID|CSeq):", l, re.I)]
            sip.sendto(("SIP/2.0 200 OK\r\n" + "\r\n".join(lines) + "\r\nContent-Length: 0\r\n\r\n").encode(), src)
            return at


def first_event(rtp, t0):
    rtp.settimeout(5)
    while True:
        data, _ = rtp.recvfrom(2048)
        if len(data) > 12 and data[1] & 0x7F == 101:
            return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/ontime-gateway"))
    args = ap.parse_args()
    sip_port, metrics_port, api_port = free_port(), free_port(socket.SOCK_STREAM), free_port(socket.SOCK_STREAM)
    gw = "127.0.0.1:%d" % sip_port
    api_addr = "127.0.0.1:%d" % api_port
    env = dict(os.environ)
    env.setdefault("ORT_DYLIB_PATH", os.path.join(ROOT, ".cache/models/libonnxruntime.so.1.31.1"))
    env.setdefault("ONTIME_MODELS_DIR", os.path.join(ROOT, ".cache/models"))
    env["ONTIME_API_AUTH_TOKEN"] = TOKEN  # the environment, never the command line
    log = tempfile.NamedTemporaryFile(prefix="ontime-latency-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [args.binary, "--sip-listen", gw, "--metrics-listen", "127.0.0.1:%d" % metrics_port,
         "--rtp-ports", "34000-34199", "--api-listen", api_addr, "--api-account-sid", ACCOUNT,
         "--rtp-timeout", "off", "--log-format", "json"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                api(api_addr, "GET", "Calls.json")
                break
            except OSError:
                time.sleep(0.1)
        to_dtmf, to_bye = [], []
        for i in range(args.calls):
            sip = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sip.bind(("127.0.0.1", 0))
            sip.settimeout(10)
            rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            rtp.bind(("127.0.0.1", 0))
            call_id = "latency-%d-%08x" % (i, random.getrandbits(32))
            invite(sip, gw, rtp.getsockname()[1], call_id, "t%d" % i)
            _, body = api(api_addr, "GET", "Calls.json?" + urllib.parse.urlencode({"Status": "in-progress"}))
            sid = re.search(r'"sid":"(CA[0-9a-f]{32})"', body).group(1)
            time.sleep(0.3)  # the call's stream is running
            t0 = time.perf_counter()
            api(api_addr, "POST", "Calls/%s.json" % sid, {"Twiml": '<Response><Play digits="1"/></Response>'})
            to_dtmf.append(first_event(rtp, t0))
            time.sleep(0.5)
            t0 = time.perf_counter()
            api(api_addr, "POST", "Calls/%s.json" % sid, {"Status": "completed"})
            to_bye.append(wait_bye(sip, t0))
            sip.close()
            rtp.close()
        ms = lambda xs: "median %.1f ms, max %.1f ms" % (statistics.median(xs) * 1e3, max(xs) * 1e3)
        print("calls: %d" % args.calls)
        print("API request -> first RFC 4733 packet at the caller: %s" % ms(to_dtmf))
        print("API request -> BYE at the caller: %s" % ms(to_bye))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log.name)


if __name__ == "__main__":
    sys.exit(main())
