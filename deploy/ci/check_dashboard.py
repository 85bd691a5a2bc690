"""Check deploy/grafana/ontime.json: valid JSON, panels laid out on the 24-column grid without
overlap, every query on the templated Prometheus datasource, and every ontime_* metric a query
names is defined in the code (gateway/src/ops/metrics.rs, gateway/src/ops/sip_stats.rs,
crates/sender/src/metrics_names.rs, crates/inference/src/metrics.rs). The gateway test `grafana_dashboard_metrics_are_served` checks
the same names against a running gateway's /metrics.

usage: check_dashboard.py DASHBOARD ROOT
"""

import json
import re
import sys

DASHBOARD, ROOT = sys.argv[1], sys.argv[2]
SOURCES = ["gateway/src/ops/metrics.rs", "gateway/src/ops/ws_metrics.rs", "gateway/src/ops/sip_stats.rs", "crates/sender/src/metrics_names.rs", "crates/inference/src/metrics.rs"]
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def main() -> int:
    with open(DASHBOARD) as f:
        dash = json.load(f)
    defined = set()
    for path in SOURCES:
        with open(f"{ROOT}/{path}") as f:
            defined |= set(re.findall(r'"(ontime_[a-z0-9_]+)"', f.read()))
    problems = []
    used = set()
    cells = {}
    for panel in dash["panels"]:
        g = panel["gridPos"]
        if g["x"] < 0 or g["x"] + g["w"] > 24:
            problems.append(f"panel {panel['title']!r} leaves the 24-column grid")
        for dx in range(g["w"]):
            for dy in range(g["h"]):
                cell = (g["x"] + dx, g["y"] + dy)
                if cell in cells:
                    problems.append(f"panels {cells[cell]!r} and {panel['title']!r} overlap")
                cells[cell] = panel["title"]
        if panel["type"] == "row":
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel {panel['title']!r} is not on the templated datasource")
        if not panel.get("targets"):
            problems.append(f"panel {panel['title']!r} has no query")
        for t in panel.get("targets", []):
            names = re.findall(r"\bontime_[a-z0-9_]+", t["expr"])
            if not names:
                problems.append(f"panel {panel['title']!r} query {t['refId']} names no ontime metric")
            for name in names:
                base = name
                for suffix in HISTOGRAM_SUFFIXES:
                    if name.endswith(suffix) and name[: -len(suffix)] in defined:
                        base = name[: -len(suffix)]
                used.add(base)
                if base not in defined:
                    problems.append(f"panel {panel['title']!r}: {name} is not a metric the code defines")
            if t["expr"].count("(") != t["expr"].count(")"):
                problems.append(f"panel {panel['title']!r}: unbalanced parentheses in {t['expr']}")
    required = {
        "ontime_sender_late_ticks_total", "ontime_sender_tick_lateness_seconds", "ontime_calls_active",
        "ontime_cgroup_throttled_periods_total", "ontime_cgroup_periods_total",
        "ontime_inference_queue_wait_seconds", "ontime_jitter_discarded_total",
    }
    for name in sorted(required - used):
        problems.append(f"the dashboard does not show {name}")
    for p in problems:
        print(f"FAIL {p}")
    print(f"dashboard: {len(dash['panels'])} panels, {len(used)} metrics, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
