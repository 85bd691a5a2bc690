#!/usr/bin/env python3
"""CPU a real pipecat 1.14 bot spends per call-second behind ontime, two ways, in one run:

- own:    the bot runs its own Silero VAD and Smart Turn v3 (pipecat's defaults for a Twilio bot);
- ontime: the bot's VAD and turn model are off; ontime's events (--ws-ontime-events true)
          drive its turns through ontime_pipecat.OntimeFrameSerializer.

For each way: one bot process (integrations/pipecat/examples/reply_bot.py in .cache/pipecat-venv)
and one gateway on loopback; then N = 1, 4, 8 concurrent sipp callers (one sipp per call), each
speaking fresh espeak-ng speech and listening to the bot's reply for --listen-ms. The bot's CPU
is utime + stime of /proc/PID/stat (all its threads) around each step; call-seconds are the
bot's own per-call durations (WebSocket open to close). Prints a Markdown table and writes JSON.

    scripts/setup.sh   # venv, sipp, espeak-ng, sox
    scripts/pipecat_cpu.py [--gateway PATH] [--steps 1,4,8] [--json target/pipecat-cpu/result.json]

Traffic stays on 127.0.0.1; every process started is stopped at the end.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".cache/pipecat-venv/bin/python"
BOT = ROOT / "integrations/pipecat/examples/reply_bot.py"
TICK = os.sysconf("SC_CLK_TCK")
SENTENCES = [
    "Hello, I would like to check the status of my order please.",
    "Could you tell me when the next train to the airport leaves?",
    "I am calling because my internet has been down since this morning.",
    "Please book a table for four people tonight at seven thirty.",
    "Can you remind me what my current balance is on the card?",
    "I need to change the delivery address for my parcel.",
    "What time does the pharmacy on the main street close today?",
    "I would like to cancel my appointment for next Tuesday.",
]


def free_port(kind=socket.SOCK_DGRAM) -> int:
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def free_udp_block(n: int) -> int:
    """An even base port with n free UDP ports above it."""
    for _ in range(200):
        base = max(free_port() & ~1, 20000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free UDP block")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def wait_for(pred, limit: float, what: str):
    until = time.time() + limit
    while time.time() < until:
        if pred():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def speech(dir: Path, i: int) -> Path:
    raw, out = dir / f"s{i}.wav", dir / f"s{i}.ulaw.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "170", "-w", str(raw),
                    SENTENCES[i % len(SENTENCES)]], check=True)
    subprocess.run(["sox", str(raw), "-r", "8000", "-c", "1", "-e", "mu-law", str(out)], check=True)
    return out


def scenario(dir: Path, speech_file: Path, listen_ms: int, i: int) -> Path:
    text = (ROOT / "fixtures/sipp/caller_speaks.xml").read_text()
    text = text.replace("@SPEECH@", str(speech_file)).replace("@LISTEN_MS@", str(listen_ms))
    out = dir / f"scen{i}.xml"
    out.write_text(text)
    return out


def metric(metrics_url: str, series: str) -> float:
    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.rsplit(" ", 1)[1])
    except OSError:
        pass
    return float("nan")


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def run_mode(mode: str, args, work: Path, speeches: list[Path]) -> list[dict]:
    procs = []
    logs = work / mode
    logs.mkdir(exist_ok=True)
    try:
        bot_port = free_port(socket.SOCK_STREAM)
        rec = logs / "calls.jsonl"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "integrations/pipecat/src"))
        bot = subprocess.Popen(
            [str(VENV_PY), str(BOT), "--port", str(bot_port), "--turn", mode, "--record", str(rec),
             "--log-level", "WARNING", *args.bot_arg],
            env=env, stdin=subprocess.DEVNULL, stdout=open(logs / "bot.log", "w"),
            stderr=subprocess.STDOUT)
        procs.append(bot)
        wait_for(lambda: http_ok(f"http://127.0.0.1:{bot_port}/healthz"), 60, "the bot")

        sip_port, metrics_port = free_port(), free_port(socket.SOCK_STREAM)
        rtp = free_udp_block(200)
        gw_args = [args.gateway, "--sip-listen", f"127.0.0.1:{sip_port}",
                   "--metrics-listen", f"127.0.0.1:{metrics_port}",
                   "--rtp-ports", f"{rtp}-{rtp + 199}", "--log-format", "json",
                   "--agent", f"ws://127.0.0.1:{bot_port}/media-stream"]
        if mode == "ontime":
            gw_args += ["--ws-ontime-events", "true"]
        gw_env = dict(os.environ, RUST_LOG="info")
        gw_env.setdefault("ORT_DYLIB_PATH", str(ROOT / ".cache/models/libonnxruntime.so.1.31.1"))
        gw_env.setdefault("ONTIME_MODELS_DIR", str(ROOT / ".cache/models"))
        gw = subprocess.Popen(gw_args, env=gw_env, stdin=subprocess.DEVNULL,
                              stdout=open(logs / "gateway.log", "w"),
                              stderr=open(logs / "gateway.err", "w"))
        procs.append(gw)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_for(lambda: http_ok(f"http://127.0.0.1:{metrics_port}/readyz"), 30, "the gateway")

        rows = []
        for n in args.steps:
            before_records = len(records(rec))
            underruns_before = metric(metrics_url, "ontime_sender_underruns_total")
            cpu0, t0 = cpu_seconds(bot.pid), time.time()
            callers = []
            for i in range(n):
                scen = scenario(logs, speeches[i], args.listen_ms, i)
                callers.append(subprocess.Popen(
                    ["sipp", f"127.0.0.1:{sip_port}", "-sf", str(scen), "-m", "1", "-l", "1",
                     "-i", "127.0.0.1", "-p", str(free_port()),
                     "-mi", "127.0.0.1", "-mp", str(free_udp_block(4)),
                     "-timeout", "60s", "-timeout_error", "-nostdin"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(args.stagger)
            ok = sum(1 for c in callers if c.wait(timeout=90) == 0)
            wait_for(lambda: len(records(rec)) >= before_records + n, 30, "the bot's call records")
            cpu1, t1 = cpu_seconds(bot.pid), time.time()
            new = records(rec)[before_records:]
            call_secs = sum(r["ended_unix"] - r["connected_unix"] for r in new)
            row = {
                "mode": mode, "calls": n, "sipp_ok": ok,
                "calls_replied": sum(1 for r in new if r["replies"] >= 1),
                "bot_cpu_s": round(cpu1 - cpu0, 2), "wall_s": round(t1 - t0, 1),
                "call_s": round(call_secs, 1),
                "cpu_per_call_s": round((cpu1 - cpu0) / call_secs, 4) if call_secs else None,
                "bot_cores_busy": round((cpu1 - cpu0) / (t1 - t0), 3),
                "gateway_underruns": metric(metrics_url, "ontime_sender_underruns_total")
                - underruns_before,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
            time.sleep(args.pause)
        return rows
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--gateway", default=str(target / "release/ontime-gateway"))
    ap.add_argument("--steps", default="1,4,8")
    ap.add_argument("--modes", default="own,ontime")
    ap.add_argument("--listen-ms", type=int, default=14000)
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between call starts")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds between steps")
    ap.add_argument("--bot-arg", action="append", default=[],
                    help="extra flag for reply_bot.py (repeatable), e.g. --bot-arg=--auto-silence=off")
    ap.add_argument("--json", default=str(ROOT / "target/pipecat-cpu/result.json"))
    args = ap.parse_args()
    args.steps = [int(s) for s in args.steps.split(",")]
    for tool in ("sipp", "espeak-ng", "sox"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run scripts/setup.sh")
    if not VENV_PY.exists():
        sys.exit("no .cache/pipecat-venv: run scripts/setup.sh")
    if not Path(args.gateway).exists():
        subprocess.run(["cargo", "build", "--release", "-p", "ontime-gateway"], cwd=ROOT, check=True)

    with tempfile.TemporaryDirectory(prefix="ontime-pipecat-cpu-") as tmp:
        work = Path(tmp)
        speeches = [speech(work, i) for i in range(max(args.steps))]
        rows = []
        for mode in args.modes.split(","):
            rows += run_mode(mode, args, work, speeches)

    by = {(r["mode"], r["calls"]): r for r in rows}
    print()
    print("| concurrent calls | own VAD + Smart Turn: bot CPU s per call-s | ontime events: bot CPU s per call-s | ratio own / ontime | calls replied (own, ontime) |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.steps:
        a, b = by.get(("own", n)), by.get(("ontime", n))
        if not a or not b:
            continue
        ratio = a["cpu_per_call_s"] / b["cpu_per_call_s"] if b["cpu_per_call_s"] else float("nan")
        print(f"| {n} | {a['cpu_per_call_s']:.4f} | {b['cpu_per_call_s']:.4f} | {ratio:.2f}× | "
              f"{a['calls_replied']}/{n}, {b['calls_replied']}/{n} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out.write_text(json.dumps({
        "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "gateway": args.gateway, "commit": commit, "rows": rows}, indent=1))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
