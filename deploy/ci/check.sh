#!/usr/bin/env bash
# Validate deploy/ without a cluster or a Docker engine (run by scripts/test.sh):
#  - Helm chart: `helm lint` and rendering by Helm's own engine (Helm v4 Go SDK, through the
#    helm-python-sdk wheel from PyPI: there is no helm binary on the reachable registries) for
#    three value sets that turn on every template, plus values the chart must refuse;
#  - rendered Deployment/Service/HPA/PDB: kubernetes-validate --strict against the Kubernetes
#    OpenAPI schemas of the oldest (1.25) and newest (1.37) versions it ships;
#  - rendered PodMonitor/ServiceMonitor: the Prometheus Operator CRD schemas of
#    @kubernetes-models/prometheus-operator (npm);
#  - values.yaml and Chart.yaml: yamllint;
#  - the Grafana dashboard: structure, and every metric it queries is defined in the code;
#  - the Kamailio config: `kamailio -c` (syntax and module parameters), when kamailio is installed;
#  - deploy/docker/stage.sh (the Dockerfile's build steps): bash -n.
# Tools go to .cache/deploy-tools (git-ignored) once.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
tools=$root/.cache/deploy-tools
venv=$tools/venv
if ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yamllint' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "helm-python-sdk==0.2.2" "kubernetes-validate==1.37.0" "yamllint==1.38.0"
fi
node_dir=$tools/node
if [ ! -d "$node_dir/node_modules/@kubernetes-models/prometheus-operator" ]; then
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --silent --no-audit --no-fund \
    "@kubernetes-models/prometheus-operator@6.0.0" "js-yaml@4.1.0" >/dev/null
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$venv/bin/yamllint" --strict -c deploy/ci/yamllint.yaml \
  deploy/helm/ontime/Chart.yaml deploy/helm/ontime/values.yaml
"$venv/bin/python" deploy/ci/render_chart.py deploy/helm/ontime "$out"

builtin=()
monitors=()
for f in "$out"/*/*.yaml; do
  if grep -q '^apiVersion: monitoring.coreos.com/' "$f"; then monitors+=("$f"); else builtin+=("$f"); fi
done
for k8s in 1.25.0 1.37.0; do
  "$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s" "${builtin[@]}"
done
echo "deploy: ${#builtin[@]} rendered manifests valid (strict) for Kubernetes 1.25 and 1.37"
# The validator is an ES module: it resolves its packages from its own folder.
cp deploy/ci/validate_monitors.mjs "$node_dir/"
node "$node_dir/validate_monitors.mjs" "${monitors[@]}"

python3 deploy/ci/check_dashboard.py deploy/grafana/ontime.json "$root"

if command -v kamailio >/dev/null; then
  kamailio -c -f deploy/kamailio/kamailio.cfg >"$out/kamailio-check.log" 2>&1 \
    || { cat "$out/kamailio-check.log"; echo "deploy: kamailio -c failed" >&2; exit 1; }
  echo "deploy: kamailio -c accepts deploy/kamailio/kamailio.cfg"
elif [ -n "${CI:-}" ]; then
  echo "deploy: kamailio is required in CI (scripts/setup.sh installs it)" >&2
  exit 1
else
  echo "deploy: SKIP kamailio -c (kamailio not installed; run scripts/setup.sh)"
fi
bash -n deploy/docker/stage.sh
echo "deploy: all checks passed"
