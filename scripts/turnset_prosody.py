#!/usr/bin/env python3
"""Whether prosody tells a mid-sentence pause from the end of a turn, on the labelled set.

    scripts/turnset_prosody.py <dir>      (a set from scripts/turnset.py --extended)

The reply hold-back's last unbuilt lever (docs/inference.md, *Reply hold-back*): a final pitch
fall or a lengthened last syllable marks the end of a statement; a pause inside one keeps the
pitch up and the syllable short. Before building it into the inference thread, this measures
it. At each place a turn could be ended, the last voice before it is analysed:

- "end": where a `complete` or `short` turn's speech ends (a turn that must be answered);
- "pause": where a `mid` or `paused` turn's inner pause begins (an end there cuts the caller
  off); "cut": where a `cut` turn stops (incomplete).

Features, over the voiced frames (autocorrelation pitch, 40 ms windows every 10 ms, 70–400 Hz)
of the last 500 ms of voice:
- slope: the pitch's linear slope over its last 300 ms, semitones per second;
- level: the last 100 ms's pitch against the turn's median before it, semitones;
- last_run: the length of the last voiced run, ms (lengthening).

For each feature and split, the ROC AUC of telling "end" from "pause" (0.5: no better than
chance; 1.0 or 0.0: perfect, by its sign), and the best single threshold's share of pauses
caught while keeping 95 % of ends. Pure numpy; deterministic. Not part of `make test`.
"""

import json
import sys

import numpy as np

RATE = 8000
WIN = 320  # 40 ms
HOP = 80  # 10 ms


def ulaw_decode(b):
    b = ~b.astype(np.int32) & 0xFF
    sign = b & 0x80
    exp = (b >> 4) & 7
    man = b & 0x0F
    mag = ((man << 3) + 0x84) << exp
    mag = mag - 0x84
    return np.where(sign != 0, -mag, mag).astype(np.float64)


def read(path):
    """A WAV file's samples: 16-bit PCM or G.711 µ-law (format 7, which `wave` refuses)."""
    data = open(path, "rb").read()
    pos, fmt, bits = 12, None, 16
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = data[pos + 8 : pos + 8 + size]
        if cid == b"fmt ":
            fmt = int.from_bytes(body[0:2], "little")
            bits = int.from_bytes(body[14:16], "little")
        elif cid == b"data":
            if fmt == 7:
                return ulaw_decode(np.frombuffer(body, dtype=np.uint8))
            if fmt == 1 and bits == 16:
                return np.frombuffer(body, dtype="<i2").astype(np.float64)
            raise ValueError(f"{path}: format {fmt}/{bits} bits")
        pos += 8 + size + (size & 1)
    raise ValueError(f"{path}: no data chunk")


def frames(x):
    n = max(0, (len(x) - WIN) // HOP + 1)
    return np.stack([x[i * HOP : i * HOP + WIN] for i in range(n)]) if n else np.zeros((0, WIN))


def pitch_track(x):
    """Per 10 ms frame: (rms dBFS, f0 Hz or nan)."""
    fr = frames(x)
    out = []
    lo, hi = RATE // 400, RATE // 70
    for f in fr:
        f = f - f.mean()
        rms = np.sqrt(np.mean(f * f)) + 1e-9
        db = 20 * np.log10(rms / 32768)
        f0 = np.nan
        if db > -45:
            ac = np.correlate(f, f, "full")[WIN - 1 :]
            if ac[0] > 0:
                ac = ac / ac[0]
                lag = lo + int(np.argmax(ac[lo:hi]))
                if ac[lag] > 0.45:
                    f0 = RATE / lag
        out.append((db, f0))
    return out


def point_ms(t, x):
    """Where the place to judge is, ms into the file."""
    if t["kind"] in ("mid", "paused"):
        return t["pause_start_ms"]
    # complete, short, cut: the speech runs to the file's 1.2 s tail.
    return len(x) * 1000 // RATE - 1200


# The analysis window: this much voice before the last voiced frame (the gateway's
# `ontime_inference::prosody` does the same on the turn's audio).
WINDOW_FRAMES = 150


def features(x, at_ms):
    x = x[: at_ms * RATE // 1000]
    fr = frames(x)
    if not len(fr):
        return None
    centred = fr - fr.mean(axis=1, keepdims=True)
    db = 20 * np.log10(np.sqrt(np.mean(centred * centred, axis=1)) / 32768 + 1e-12)
    loud = np.nonzero(db > -40)[0]
    if not len(loud):
        return None
    last = int(loud[-1])
    first = max(0, last - WINDOW_FRAMES + 1)
    track = pitch_track(x[first * HOP : last * HOP + WIN])
    f0 = np.array([f for _, f in track])
    st = 12 * np.log2(f0 / 100.0)
    tail = st[-50:]  # the last 500 ms of voice
    voiced = ~np.isnan(tail)
    if voiced.sum() < 5:
        return None
    idx = np.arange(len(tail))
    recent = idx >= len(tail) - 30
    sel = voiced & recent
    slope = np.nan
    if sel.sum() >= 4:
        slope = np.polyfit(idx[sel] * 0.01, tail[sel], 1)[0]
    before = st[:-10]
    before = before[~np.isnan(before)]
    end = st[-10:][~np.isnan(st[-10:])]
    level = np.median(end) - np.median(before) if len(before) and len(end) else np.nan
    run = 0
    for v in reversed(~np.isnan(st)):
        if not v:
            if run:
                break
            continue
        run += 1
    return {"slope": slope, "level": level, "last_run": run * 10.0}


def auc(pos, neg):
    """P(a random end scores above a random pause)."""
    pos, neg = np.asarray(pos), np.asarray(neg)
    if not len(pos) or not len(neg):
        return float("nan")
    gt = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return gt / (len(pos) * len(neg))


def caught_at_95(ends, pauses, higher_is_end):
    """Share of pauses a threshold catches while it keeps 95 % of ends on the end side."""
    ends, pauses = np.asarray(ends), np.asarray(pauses)
    if not len(ends) or not len(pauses):
        return float("nan")
    if higher_is_end:
        thr = np.quantile(ends, 0.05)
        return float((pauses < thr).mean())
    thr = np.quantile(ends, 0.95)
    return float((pauses > thr).mean())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    from pathlib import Path

    d = Path(sys.argv[1])
    labels = json.loads((d / "labels.json").read_text())["turns"]
    rows = []
    for t in labels:
        x = read(d / t["file"])
        f = features(x, point_ms(t, x))
        if f is None:
            continue
        group = {"complete": "end", "short": "end", "mid": "pause", "paused": "pause", "cut": "cut"}[
            t["kind"]
        ]
        rows.append((t.get("split", "all"), t["kind"], group, f))
    for split in sorted({r[0] for r in rows}):
        print(f"split {split}")
        for kind in ["complete", "short", "mid", "paused", "cut"]:
            fs = [r[3] for r in rows if r[0] == split and r[1] == kind]
            if not fs:
                continue
            med = {k: np.nanmedian([f[k] for f in fs]) for k in ("slope", "level", "last_run")}
            print(
                f"  {kind:9} n={len(fs):3}  slope median {med['slope']:7.1f} st/s"
                f"  level {med['level']:6.1f} st  last voiced run {med['last_run']:5.0f} ms"
            )
        for name in ("slope", "level", "last_run"):
            ends = [r[3][name] for r in rows if r[0] == split and r[2] == "end"]
            pauses = [r[3][name] for r in rows if r[0] == split and r[2] == "pause"]
            ends = [v for v in ends if not np.isnan(v)]
            pauses = [v for v in pauses if not np.isnan(v)]
            a = auc(ends, pauses)
            higher = a >= 0.5
            print(
                f"  {name:8} end vs pause: AUC {a:.3f} ({len(ends)} ends, {len(pauses)} pauses)"
                f"  pauses caught keeping 95 % of ends: {100 * caught_at_95(ends, pauses, higher):.1f} %"
            )


if __name__ == "__main__":
    main()
