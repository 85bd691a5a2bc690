#!/usr/bin/env python3
"""Per-kind figures of a labelled-set run, and what the reply hold-back's doubt wait would do.

    turnset_eval <dir> --rules early:0.9:160 2> eval.txt
    scripts/turnset_doubt.py <dir> eval.txt

Reads the per-turn lines `turnset_eval` prints on stderr (each Smart Turn verdict as
`at_ms:probability:complete`) and the set's `labels.json`, and prints, per kind: turns, false
ends (a complete verdict inside a paused turn's pause, before the speech's end, or on a cut
sentence), turns answered at
their end with the latency p50 / p95, and the probabilities of the false ends and of the right
ends. Then, for the doubt wait of `gateway/src/call/hold_back.rs` (a verdict below SURE waits
(SURE − p) / (SURE − 0.5) × WAIT, at most WAIT): how many ends inside a pause it would have
caught (its release after the caller's resumption plus the VAD's 128 ms start lag; the verdict
is taken at its stream time) and what it adds to the complete sentences it holds. The doubt
wait is stateless, so the set measures it; the hold-back's habit rule needs a caller's history
and is measured with the load harness (`ontime-load --mid-pause`, docs/inference.md).
"""

import json
import re
import statistics
import sys

LINE = re.compile(r"\s*\d+/\d+ (\S+)\s+(\S+)\s+label (\S+)\s+\S+=(\S+) verdicts ?(.*)")
START_LAG_MS = 128
RULES = [(0.9, 600), (0.95, 600), (0.95, 1000), (0.97, 1200)]


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else None


def doubt_wait(p, sure, wait):
    d = (sure - p) / (sure - 0.5)
    return 0.0 if d <= 0 else wait * min(1.0, d)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    labels = {t["file"]: t for t in json.load(open(sys.argv[1] + "/labels.json"))["turns"]}
    rows = []
    for line in open(sys.argv[2]):
        m = LINE.match(line)
        if not m:
            continue
        name, kind, _, decision, verdicts = m.groups()
        vs = [(int(a), float(b), c == "1") for a, b, c in (x.split(":")[:3] for x in verdicts.split(",") if x)]
        latency = float(decision.split("@")[1]) if "@" in decision else None
        rows.append((labels[name], kind, decision.split("@")[0], vs, latency))
    print("kind      turns  false ends  answered at the end  latency p50/p95 ms  p(false ends) p50  p(right ends) p50")
    for kind in sorted({r[1] for r in rows}):
        these = [r for r in rows if r[1] == kind]
        false_p, right_p, lat = [], [], []
        for t, _, decision, vs, latency in these:
            pause_end = t.get("pause_end_ms")
            early = [v for v in vs if v[2] and pause_end is not None and v[0] < pause_end + 100]
            if early:
                false_p.append(early[0][1])
            elif decision == "premature":
                false_p.append([v for v in vs if v[2]][0][1])
            elif decision == "complete" and not t["complete"]:
                false_p.append([v for v in vs if v[2]][-1][1])
            elif decision == "complete":
                right_p.append([v for v in vs if v[2]][-1][1])
                lat.append(latency)
        fmt = lambda x: "-" if x is None else "%.0f" % x
        print(
            "%-8s %6d %11d %20d %11s/%-6s %18s %18s"
            % (
                kind,
                len(these),
                len(false_p),
                len(lat),
                fmt(percentile(lat, 0.5)),
                fmt(percentile(lat, 0.95)),
                "-" if not false_p else "%.3f" % statistics.median(false_p),
                "-" if not right_p else "%.3f" % statistics.median(right_p),
            )
        )
    print("\ndoubt wait (below SURE, up to WAIT ms)   pause ends caught / of   complete sentences held / of   added p50/p95/mean ms")
    for sure, wait in RULES:
        caught = premature = 0
        added = []
        for t, kind, decision, vs, _ in rows:
            pause_end = t.get("pause_end_ms")
            if pause_end is not None:
                early = [v for v in vs if v[2] and v[0] < pause_end + 100]
                if early:
                    premature += 1
                    at, p, _ = early[0]
                    caught += at + doubt_wait(p, sure, wait) > pause_end + START_LAG_MS
            elif kind in ("complete", "short") and decision == "complete":
                added.append(doubt_wait([v for v in vs if v[2]][-1][1], sure, wait))
        print(
            "below %.2f, up to %4d ms %33d / %-3d %19d / %-3d %11.0f/%.0f/%.0f"
            % (
                sure,
                wait,
                caught,
                premature,
                sum(1 for a in added if a > 0),
                len(added),
                percentile(added, 0.5) or 0,
                percentile(added, 0.95) or 0,
                statistics.mean(added) if added else 0,
            )
        )


if __name__ == "__main__":
    main()
