"""Render deploy/helm/ontime with Helm's own engine (Helm v4 Go SDK via helm-python-sdk) and write
the manifests of several value sets for the schema validators; check that bad values are refused.

usage: render_chart.py CHART OUT_DIR
"""

import os
import sys

import helm_python as helm

CHART, OUT = sys.argv[1], sys.argv[2]

# Value sets that together turn every template and branch on.
CASES = {
    "default": {},
    "everything": {
        "hostNetwork": True,
        "realtime": {"enabled": True},
        "autoscaling": {"enabled": True},
        "metrics": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}},
        "gateway": {"senderCore": 1, "extraEnv": [{"name": "RUST_LOG", "value": "info"}]},
        "podDisruptionBudget": {"enabled": False},
    },
    "small": {
        "maxCalls": 4,
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        "gateway": {"rtpPortFirst": 30000, "rtpPortLast": 30009, "drainTimeout": "60s"},
        "terminationGracePeriodSeconds": 70,
        "preStopSleepSeconds": 0,
        "service": {"headless": False},
    },
}

# Values the chart must refuse, with a word its message must contain.
BAD = {
    "rtp range smaller than 2 x maxCalls": ({"maxCalls": 200}, "rtpPort"),
    "grace period shorter than the drain": ({"terminationGracePeriodSeconds": 60}, "terminationGracePeriodSeconds"),
    "HPA target above maxCalls": ({"autoscaling": {"enabled": True, "targetCallsPerPod": 50}}, "targetCallsPerPod"),
    "drain timeout not in seconds": ({"gateway": {"drainTimeout": "5m"}}, "drainTimeout"),
    "unknown agent": ({"gateway": {"agent": "carrier-pigeon"}}, "agent"),
}


def main() -> int:
    lint = helm.lint(CHART)
    errors = [m for m in lint["messages"] if m["severity"] >= 2] + list(lint["errors"])
    for m in lint["messages"]:
        print(f"helm lint: {m}")
    if errors:
        print(f"FAIL helm lint: {errors}")
        return 1
    failures = 0
    with helm.Chart.load(CHART) as chart:
        for name, values in CASES.items():
            chart.validate_schema(values)
            manifests = chart.render(values, name="ontime", namespace="voice")
            written = 0
            for path, text in sorted(manifests.items()):
                if not path.endswith(".yaml") or not text.strip():
                    continue
                out = os.path.join(OUT, name, os.path.basename(path))
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "w") as f:
                    f.write(text)
                written += 1
            print(f"rendered {name}: {written} manifests")
        for what, (values, word) in BAD.items():
            try:
                chart.validate_schema(values)
                chart.render(values, name="ontime", namespace="voice")
            except Exception as e:  # the SDK's typed errors all derive from HelmError
                if word not in str(e):
                    print(f"FAIL {what}: refused, but the message does not name `{word}`: {e}")
                    failures += 1
                else:
                    print(f"refused as expected: {what}")
                continue
            print(f"FAIL {what}: the chart rendered it")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
