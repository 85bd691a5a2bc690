#!/usr/bin/env python3
"""CPU per call, side by side: the whole ontime gateway against pipecat's Silero VAD + Smart Turn
alone, at the same call counts and the same turn rate, on the same core.

- ontime: `ontime-load --gateway ontime-gateway --cpuset C --steps N` (one fresh gateway per N):
  real SIP/RTP callers speaking the four `fixtures/callers` utterances, the stub agent answering
  through Silero VAD and Smart Turn v3. The figure is the gateway process's CPU over the window
  (`cpu_pct` in its JSON), per admitted call, and its turns per call-minute.
- pipecat: one Python process (pipecat 1.14 from `.cache/pipecat-venv`) pinned to the same core,
  holding N streams the way a pipecat bot's input does: per 20 ms frame
  `SileroVADAnalyzer.analyze_audio` and `LocalSmartTurnAnalyzerV3.append_audio`, and on each VAD
  stop (or Smart Turn's silence timeout) `analyze_end_of_turn`, each analyzer on its own executor
  thread as pipecat runs them. The audio is the same four utterances, µ-law decoded and resampled
  to 16 kHz beforehand (a Twilio bot's pipeline rate; the resampling is not charged to pipecat),
  then digital silence for as long as makes its turn rate ontime's measured one. No transport,
  no STT, no LLM, no TTS: only the two analyzers, so pipecat's figure is a floor of what a pipecat
  bot spends.

Prints a Markdown table (per-call CPU both ways, the ratio, turns per call-minute both ways, and
how much of the core the host took, `steal` in /proc/stat, during each side's window) and
writes JSON. Every process started is stopped at the end.

    cargo build --release -p ontime-gateway -p ontime-loadgen
    scripts/setup.sh            # the pipecat venv
    scripts/peer_cost.py [--steps 1,8,64] [--cpuset 1] [--measure 30] [--json PATH]
"""

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".cache/pipecat-venv/bin/python"
CALLERS = [ROOT / f"fixtures/callers/utterance_{i}.ulaw.wav" for i in range(1, 5)]
FRAME_MS = 20
RATE = 16000


# ---------------------------------------------------------------------------------------------
# The pipecat side (runs inside the venv, as a child process pinned to the core).


def read_wav(path: Path):
    """(format tag, sample rate, bits per sample, data) of a RIFF WAVE file; Python's `wave`
    reads PCM only, and the caller fixtures are G.711 µ-law (format 7)."""
    data = path.read_bytes()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a WAVE file")
    at, fmt, body = 12, None, None
    while at + 8 <= len(data):
        cid, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        chunk = data[at + 8 : at + 8 + size]
        if cid == b"fmt ":
            fmt = (int.from_bytes(chunk[0:2], "little"), int.from_bytes(chunk[4:8], "little"),
                   int.from_bytes(chunk[14:16], "little"))
        elif cid == b"data":
            body = chunk
        at += 8 + size + (size & 1)
    if fmt is None or body is None:
        raise ValueError(f"{path}: no fmt or data chunk")
    return fmt[0], fmt[1], fmt[2], body


def ulaw_to_16k(path: Path):
    import numpy as np
    import soxr

    tag, rate, bits, raw = read_wav(path)
    if tag == 7:
        # G.711 µ-law, as the fixtures are stored.
        u = ~np.frombuffer(raw, dtype=np.uint8)
        sign = u & 0x80
        exponent = (u >> 4) & 0x07
        mantissa = u & 0x0F
        magnitude = ((mantissa.astype(np.int32) << 3) + 0x84) << exponent
        pcm = np.where(sign != 0, 0x84 - magnitude, magnitude - 0x84).astype(np.int16)
    else:
        pcm = np.frombuffer(raw, dtype=np.int16)
    out = soxr.resample(pcm.astype(np.float32) / 32768.0, rate, RATE)
    return (np.clip(out, -1.0, 1.0) * 32767).astype(np.int16)


async def pipecat_call(index, utterances, gap_s, start, stop_at, counts):
    import numpy as np
    from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADState

    vad = SileroVADAnalyzer()
    vad.set_sample_rate(RATE)
    turn = LocalSmartTurnAnalyzerV3()
    turn.set_sample_rate(RATE)
    frame = RATE * FRAME_MS // 1000
    silence = np.zeros(int(gap_s * RATE), dtype=np.int16)
    # Each call starts at its own place in the cycle, so turns do not fall together.
    order = [utterances[(index + k) % len(utterances)] for k in range(len(utterances))]
    script = np.concatenate([np.concatenate([u, silence]) for u in order])
    offset = (index * 7919 * frame) % len(script)
    offset -= offset % frame
    state = VADState.QUIET
    speaking = False
    k = 0
    while True:
        deadline = start + k * FRAME_MS / 1000.0
        now = time.monotonic()
        if now >= stop_at:
            break
        if deadline > now:
            await asyncio.sleep(deadline - now)
        else:
            counts["late_ms"] = max(counts["late_ms"], (now - deadline) * 1000.0)
        at = (offset + k * frame) % len(script)
        chunk = script[at : at + frame]
        if len(chunk) < frame:
            chunk = np.concatenate([chunk, script[: frame - len(chunk)]])
        audio = chunk.tobytes()
        new = await vad.analyze_audio(audio)
        if new != state and new not in (VADState.STARTING, VADState.STOPPING):
            if new == VADState.SPEAKING:
                turn.update_vad_start_secs(vad.params.start_secs)
                speaking = True
            elif new == VADState.QUIET and speaking:
                speaking = False
                result, _ = await turn.analyze_end_of_turn()
                counts["smart_turn_runs"] += 1
                if result == EndOfTurnState.COMPLETE:
                    counts["turns"] += 1
            state = new
        if turn.append_audio(audio, speaking) == EndOfTurnState.COMPLETE:
            await turn.analyze_end_of_turn()
            counts["smart_turn_runs"] += 1
            counts["turns"] += 1
        k += 1


def core_steal_s(core):
    """Seconds the host has taken from CPU `core` since boot (its `steal` in /proc/stat): a
    window in which the host took the measured core is not a measure of the process alone."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] == f"cpu{core}":
                    return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    return None


async def pipecat_worker(calls, gap_s, warmup_s, measure_s, core):
    utterances = [ulaw_to_16k(p) for p in CALLERS]
    counts = {"turns": 0, "smart_turn_runs": 0, "late_ms": 0.0}
    start = time.monotonic() + 1.0
    stop_at = start + warmup_s + measure_s
    tasks = [
        asyncio.create_task(pipecat_call(i, utterances, gap_s, start, stop_at, counts))
        for i in range(calls)
    ]
    # The window: CPU of the whole process (every thread) from the warm-up's end.
    await asyncio.sleep(start + warmup_s - time.monotonic())
    before = resource.getrusage(resource.RUSAGE_SELF)
    steal_before = core_steal_s(core)
    counts.update(turns=0, smart_turn_runs=0, late_ms=0.0)
    t0 = time.monotonic()
    await asyncio.gather(*tasks)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    steal_after = core_steal_s(core)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    steal = None if steal_before is None or steal_after is None else steal_after - steal_before
    return {
        "calls": calls,
        "cpu_pct": 100.0 * cpu / wall,
        "wall_s": wall,
        "turns": counts["turns"],
        "smart_turn_runs": counts["smart_turn_runs"],
        "worst_late_ms": counts["late_ms"],
        "core_steal_pct": None if steal is None else 100.0 * steal / wall,
    }


# ---------------------------------------------------------------------------------------------
# The driver (any Python 3).


def utterance_seconds():
    total = 0.0
    for p in CALLERS:
        _, rate, bits, raw = read_wav(p)
        total += len(raw) / (bits // 8) / rate
    return total / len(CALLERS)


def run_ontime(args, calls, out_dir):
    path = out_dir / f"ontime-{calls}.json"
    cmd = [
        str(args.loadgen),
        "--gateway", str(args.gateway),
        "--cpuset", args.cpuset,
        "--steps", str(calls),
        "--ramp", str(args.ramp),
        "--warmup", str(args.warmup),
        "--measure", str(args.measure),
        "--json", str(path),
    ] + [f"--gateway-arg={a}" for a in args.gateway_arg]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
    step = json.loads(path.read_text())["steps"][0]
    return {
        "calls": calls,
        "admitted": step["admitted"],
        "cpu_pct": step["cpu_pct"],
        "inference_cpu_pct": step.get("inference_cpu_pct"),
        "turns": step["turns"],
        "ok": step["ok"],
        "p50_ms": step.get("lat_p50_ms"),
        "p95_ms": step.get("lat_p95_ms"),
        "smart_turn_runs": step.get("smart_turn_runs"),
        "speculative_discarded": step.get("speculative_discarded"),
        "core_steal_pct": step.get("core_steal_pct"),
    }


def run_pipecat(args, calls, gap_s):
    cmd = [
        "taskset", "-c", args.cpuset,
        str(VENV_PY), str(Path(__file__).resolve()), "--pipecat-worker",
        "--calls", str(calls), "--gap", f"{gap_s:.3f}", "--cpuset", args.cpuset,
        "--warmup", str(args.warmup), "--measure", str(args.measure),
    ]
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(os.environ, LOGURU_LEVEL="WARNING")
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_minute(turns, calls, seconds):
    return turns / calls / (seconds / 60.0) if calls and seconds else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", default="1,8,64")
    ap.add_argument("--cpuset", default="1")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--measure", type=float, default=30.0)
    ap.add_argument("--ramp", type=float, default=10.0)
    ap.add_argument("--gateway", type=Path, default=ROOT / "target/release/ontime-gateway")
    ap.add_argument("--loadgen", type=Path, default=ROOT / "target/release/ontime-load")
    ap.add_argument("--gateway-arg", action="append", default=[], metavar="FLAG",
                    help="extra flag for the gateway (repeatable), e.g. "
                         "--gateway-arg=--turn-speculate-after=off")
    ap.add_argument("--gap", type=float, help="pipecat: silence after each utterance (s); "
                    "default: what matches ontime's measured turn rate at the same N")
    ap.add_argument("--skip-pipecat", action="store_true")
    ap.add_argument("--skip-ontime", action="store_true")
    ap.add_argument("--json", type=Path, default=ROOT / "target/peer-cost/result.json")
    # The child mode, inside the venv.
    ap.add_argument("--pipecat-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.pipecat_worker:
        result = asyncio.run(pipecat_worker(args.calls, args.gap, args.warmup, args.measure,
                                            args.cpuset))
        print(json.dumps(result), flush=True)
        return

    steps = [int(s) for s in args.steps.split(",") if s]
    if not args.skip_pipecat and not VENV_PY.exists():
        sys.exit(f"no pipecat venv at {VENV_PY}: run scripts/setup.sh (or pass --skip-pipecat)")
    for need in ([] if args.skip_ontime else [args.gateway, args.loadgen]):
        if not need.exists():
            sys.exit(f"{need} missing: cargo build --release -p ontime-gateway -p ontime-loadgen")
    out_dir = args.json.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    mean_utterance = utterance_seconds()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for n in steps:
        row = {"calls": n}
        if not args.skip_ontime:
            row["ontime"] = run_ontime(args, n, out_dir)
        gap = args.gap
        if gap is None:
            o = row.get("ontime")
            rate = o and per_minute(o["turns"], o["admitted"], args.measure)
            # One turn per utterance: the cycle ontime's callers kept, less the utterance.
            gap = max(0.5, 60.0 / rate - mean_utterance) if rate else 4.0
        row["pipecat_gap_s"] = gap
        if not args.skip_pipecat:
            row["pipecat"] = run_pipecat(args, n, gap)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"\nCPU per call, % of one core (cpuset {args.cpuset}, {args.measure:g} s windows):\n")
    # Per call, and per turn: the two sides' turn rates differ a little (a turn still open when
    # the window closes, Smart Turn's verdicts), so CPU per turn is the like-for-like figure.
    print("| calls | ontime: admitted | ontime: % per call | ontime: turns/call-min "
          "| ontime: CPU ms per turn | pipecat VAD + Smart Turn: % per call "
          "| pipecat: turns/call-min | pipecat: CPU ms per turn | pipecat: worst lag (ms) "
          "| ratio per call | ratio per turn | host steal of the core, ontime / pipecat window (%) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    fmt = lambda v, d=2: "–" if v is None else f"{v:.{d}f}"
    for r in rows:
        o, p = r.get("ontime"), r.get("pipecat")
        o_call = o["cpu_pct"] / o["admitted"] if o and o["admitted"] else None
        p_call = p["cpu_pct"] / p["calls"] if p else None
        o_rate = o and per_minute(o["turns"], o["admitted"], args.measure)
        p_rate = p and per_minute(p["turns"], p["calls"], p["wall_s"])
        o_turn = o["cpu_pct"] * 10 * args.measure / o["turns"] if o and o["turns"] else None
        p_turn = p["cpu_pct"] * 10 * p["wall_s"] / p["turns"] if p and p["turns"] else None
        ratio = p_call / o_call if o_call and p_call else None
        ratio_turn = p_turn / o_turn if o_turn and p_turn else None
        print(f"| {r['calls']} | {o['admitted'] if o else '–'} | {fmt(o_call)} | {fmt(o_rate, 1)} "
              f"| {fmt(o_turn, 0)} | {fmt(p_call)} | {fmt(p_rate, 1)} | {fmt(p_turn, 0)} "
              f"| {fmt(p and p['worst_late_ms'], 0)} | {fmt(ratio, 1)}× | {fmt(ratio_turn, 1)}× "
              f"| {fmt(o and o.get('core_steal_pct'))} / {fmt(p and p.get('core_steal_pct'))} |")
        r.update(ontime_pct_per_call=o_call, pipecat_pct_per_call=p_call, ratio=ratio,
                 ontime_ms_per_turn=o_turn, pipecat_ms_per_turn=p_turn, ratio_per_turn=ratio_turn)
    print("\nA pipecat worst lag of more than a frame or two means its process did not keep up "
          "with real time: its turn rate, and so its cost per call, is then under what the calls "
          "asked of it. Host steal above a few tenths of a percent means the host took the core "
          "during that side's window: its figures then carry the host's load as well.")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    doc = {
        "rows": rows,
        "command": " ".join(sys.argv),
        "started_utc": started,
        "machine": {"node": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release()},
        "commit": commit,
    }
    args.json.write_text(json.dumps(doc, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
