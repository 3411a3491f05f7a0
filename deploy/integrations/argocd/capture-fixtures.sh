#!/usr/bin/env bash
# Captures testdata/: a CanaryDaemonSet in each phase, as the real controller writes it, from
# `daemonset-canary sim serve`. Needs daemonset-canary and kubectl on PATH (the README's set-up);
# writes testdata/*.yaml (before-kstatus-conditions.yaml is derived from successful.yaml).
# Takes about a minute. Run it again when the status changes shape, then `cargo xtask lint-deploy`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/testdata
work=$(mktemp -d)
export KUBECONFIG=$work/kubeconfig
sim_pid='' controller_pid=''
cleanup() {
  [ -n "$controller_pid" ] && kill "$controller_pid" 2>/dev/null || true
  [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
daemonset-canary sim serve --nodes 4 --speed 10 --kubeconfig "$KUBECONFIG" 2> "$work/sim.log" &
sim_pid=$!
for _ in $(seq 50); do kubectl get nodes >/dev/null 2>&1 && break; sleep 0.2; done
daemonset-canary crd | kubectl apply -f - >/dev/null
start_controller() {
  daemonset-canary run --metrics-addr 127.0.0.1:0 2>> "$work/controller.log" &
  controller_pid=$!
}
start_controller

# agent NAME VERSION STEPS [ON_FAILURE] [BEHAVIOR]: a Pods-driver CanaryDaemonSet.
agent() {
  cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: canary.daemonset.dev/v1alpha1
kind: CanaryDaemonSet
metadata: {name: $1, namespace: default}
spec:
  target: {fromContainer: agent}
  strategy:
    driver: Pods
    steps: $3
    crashLoop: {policy: Strict, restartThreshold: 2}
    onFailure: ${4:-Hold}
  template:
    spec:
      selector: {matchLabels: {app: $1}}
      template:
        metadata:
          labels: {app: $1}
          annotations: {sim.canary.daemonset.dev/behavior: "${5:-healthy}"}
        spec:
          containers: [{name: agent, image: "example.com/agent:$2"}]
YAML
}
phase_of() { kubectl get cds "$1" -o 'jsonpath={.status.phase}'; }
wait_phase() {
  for _ in $(seq 300); do [ "$(phase_of "$1")" = "$2" ] && return 0; sleep 0.2; done
  echo "$1 never reached $2 (phase $(phase_of "$1"))" >&2
  exit 1
}
capture() {
  { echo '# From `daemonset-canary sim serve` with the real controller (`run`), `kubectl get cds -o yaml`'
    echo '# (capture-fixtures.sh).'
    kubectl get cds "$1" -o yaml | grep -v '^  uid:\|^  resourceVersion:\|^  creationTimestamp:'
  } > "$out/$2"
}

steps='[{"nodes": "1"}, {"pause": {}}, {"nodes": "100%"}]'
agent a v1 "$steps"
agent b v1 '[{"nodes": "1"}, {"nodes": "100%"}]'
agent c v1 '[{"nodes": "1"}, {"nodes": "100%"}]' Rollback
for n in a b c; do wait_phase $n successful; done
capture a successful.yaml
agent a v2 "$steps" Hold slow-start=200s
wait_phase a canary
capture a canary.yaml
wait_phase a paused
capture a awaiting-promotion.yaml
daemonset-canary pause a >/dev/null
for _ in $(seq 100); do [ "$(kubectl get cds a -o 'jsonpath={.status.held}')" = true ] && break; sleep 0.2; done
capture a held.yaml
agent b v3 '[{"nodes": "1"}, {"nodes": "100%"}]' Hold crashloop
agent c v3 '[{"nodes": "1"}, {"nodes": "100%"}]' Rollback crashloop
wait_phase b failed
wait_phase c rolledBack
capture b failed.yaml
capture c rolled-back.yaml
# A workloadRef to a DaemonSet not created yet (a sync wave that applies the CanaryDaemonSet
# first): it waits, Reconciling, without a phase.
cat <<YAML | kubectl apply -f - >/dev/null
apiVersion: canary.daemonset.dev/v1alpha1
kind: CanaryDaemonSet
metadata: {name: e, namespace: default}
spec:
  target: {fromContainer: agent}
  workloadRef: {name: e-agent}
  strategy: {driver: Pods, steps: [{nodes: "1"}, {nodes: "100%"}]}
YAML
for _ in $(seq 100); do [ -n "$(kubectl get cds e -o 'jsonpath={.status.message}')" ] && break; sleep 0.2; done
capture e waiting-for-daemonset.yaml
# The controller down: a spec change it has not seen yet, and an object it never saw.
kill "$controller_pid"
wait "$controller_pid" 2>/dev/null || true
controller_pid=''
agent b v4 '[{"nodes": "1"}, {"nodes": "100%"}]'
agent d v1 '[{"nodes": "100%"}]'
capture b generation-ahead.yaml
capture d pending.yaml
python3 - "$out" <<'PY'
import sys, yaml
out = sys.argv[1]
with open(f"{out}/successful.yaml") as f:
    o = yaml.safe_load(f)
o["status"]["conditions"] = [c for c in o["status"]["conditions"] if c["type"] not in ("Ready", "Reconciling", "Stalled")]
with open(f"{out}/before-kstatus-conditions.yaml", "w") as f:
    f.write("# successful.yaml as a controller from before the kstatus conditions wrote it: the same\n# object with Ready, Reconciling and Stalled taken out (capture-fixtures.sh).\n")
    yaml.safe_dump(o, f, sort_keys=False)
PY
echo "captured $(ls "$out" | wc -l) fixtures in $out"
