#!/usr/bin/env bash
# The shipped Kubernetes manifests (deploy/kubernetes/) keep every least-privilege property they
# promise: test/kubernetes/manifests_test.py checks them statically, evaluates the pod-shape
# policy's CEL and Pod Security against the driver's pod and samples, and proves each check
# can fail on mutated copies.  Needs python3 and PyYAML (python3-yaml), no cluster.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3             # Debian's python, where python3-yaml (test/lib/deps.sh) lives
if ! $PY -c 'import yaml' 2>/dev/null; then
  echo "1..1"; echo "not ok 1 - $PY with PyYAML (python3-yaml, test/lib/deps.sh) is installed"; exit 1
fi
exec $PY "$root/test/kubernetes/manifests_test.py"
