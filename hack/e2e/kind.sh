#!/usr/bin/env bash
# `make test-e2e` against kind: create a cluster, build and load the manager image, install LeaderWorkerSet and
# kwok (the GPU node pools are simulated in kind too), deploy config/default, run test/e2e, delete the cluster.
#
# Usage: hack/e2e/kind.sh [pytest args...]
# Env:   KIND (kind), CONTAINER_TOOL (docker|podman), E2E_IMG (llmaz:e2e), PY (.venv/bin/python),
#        KIND_CLUSTER (llmaz-e2e), E2E_KEEP_CLUSTER=true to keep the cluster afterwards.
#
# Invariants:
# - LWS and kwok versions are the ones pinned in hack/cluster/{lws,kwok}/go.mod; their release manifests are
#   applied from GitHub (the kind path needs the network anyway, for images).
# - Real workloads (llmaz, LWS) stay on the kind node: it is labelled llmaz.io/e2e-node=real and their namespaces
#   carry that node selector; test namespaces carry `type=kwok` (PodNodeSelector is enabled in this cluster).
#   The kwok nodes themselves are created by the tests (test/e2e/conftest.py) once llmaz is running.
# - The cluster is deleted on every exit path unless E2E_KEEP_CLUSTER=true.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kind="${KIND:-kind}"
engine="${CONTAINER_TOOL:-docker}"
image="${E2E_IMG:-llmaz:e2e}"
py="${PY:-$repo/.venv/bin/python}"
cluster="${KIND_CLUSTER:-llmaz-e2e}"
selector_annotation="scheduler.alpha.kubernetes.io/node-selector"

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}
lws_version="$(module_version "$repo/hack/cluster/lws/go.mod" sigs.k8s.io/lws)"
kwok_version="$(module_version "$repo/hack/cluster/kwok/go.mod" sigs.k8s.io/kwok)"

work="$(mktemp -d)"
export KUBECONFIG="$work/kubeconfig"
cleanup() {
  if [[ "${E2E_KEEP_CLUSTER:-}" == true ]]; then
    echo "kept kind cluster $cluster; KUBECONFIG=$KUBECONFIG" >&2
  else
    "$kind" delete cluster --name "$cluster" >&2 || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT

kubectl_bin="$("$repo/hack/cluster/build.sh" --print)/kubectl"
[[ -x "$kubectl_bin" ]] || kubectl_bin="$(command -v kubectl)"
k() { "$kubectl_bin" "$@"; }

[[ "$engine" == podman ]] && export KIND_EXPERIMENTAL_PROVIDER=podman
cat >"$work/kind.yaml" <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    kubeadmConfigPatches:
      - |
        kind: ClusterConfiguration
        apiServer:
          extraArgs:
            enable-admission-plugins: NodeRestriction,PodNodeSelector
YAML
"$kind" create cluster --name "$cluster" --config "$work/kind.yaml" --kubeconfig "$KUBECONFIG" --wait 180s
k label nodes --all llmaz.io/e2e-node=real

"$engine" build -t "$image" "$repo"
if [[ "$engine" == podman ]]; then
  "$engine" save -o "$work/image.tar" "$image"
  "$kind" load image-archive "$work/image.tar" --name "$cluster"
else
  "$kind" load docker-image "$image" --name "$cluster"
fi

release() { echo "https://github.com/kubernetes-sigs/$1/releases/download/$2/$3"; }
k create namespace lws-system
k annotate namespace lws-system "$selector_annotation=llmaz.io/e2e-node=real"
k apply --server-side -f "$(release lws "$lws_version" manifests.yaml)"
k apply --server-side -f "$(release kwok "$kwok_version" kwok.yaml)"
k apply --server-side -f "$(release kwok "$kwok_version" stage-fast.yaml)"
k -n lws-system rollout status deployment/lws-controller-manager --timeout=180s
k -n kube-system rollout status deployment/kwok-controller --timeout=180s

k create namespace llmaz-system
k annotate namespace llmaz-system "$selector_annotation=llmaz.io/e2e-node=real"
make -C "$repo" --no-print-directory deploy IMG="$image" KUBECTL="$kubectl_bin"
k -n llmaz-system rollout status deployment/llmaz-controller-manager --timeout=180s

cd "$repo"
USE_EXISTING_CLUSTER=true E2E_TIMEOUT_SCALE="${E2E_TIMEOUT_SCALE:-3}" "$py" -m pytest test/e2e "$@"
