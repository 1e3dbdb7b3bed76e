#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from their Go modules and fetches the LeaderWorkerSet CRD; with --e2e
# also the components of the e2e tier's simulated cluster: kube-controller-manager, kube-scheduler, kwok and the
# LeaderWorkerSet controller; with --node also those of the real node: kubelet, kube-proxy, CoreDNS,
# metrics-server and kube-router (its NetworkPolicy firewall); with
# --prometheus only the Prometheus Operator and Prometheus that scrape llmaz there, and promtool, which tests llmaz's
# alerting rules (hack/images/build.sh runs it).
#
# Usage: hack/cluster/build.sh            build what is missing, print the binary directory
#        hack/cluster/build.sh --e2e      the same plus the e2e components
#        hack/cluster/build.sh --node     the same plus kubelet, kube-proxy, CoreDNS, metrics-server and kube-router
#        hack/cluster/build.sh --print    print the binary directory only
#        hack/cluster/build.sh --prometheus
#                                         only the Prometheus Operator, Prometheus and promtool: build them if
#                                         missing, print the operator's directory, then Prometheus's (which holds
#                                         promtool too), one per line
#
# Invariants:
# - Versions come only from the go.mod files next to this script (k8s.io/kubernetes in go.mod, etcd in
#   etcd/go.mod, LWS in lws/go.mod, kwok in kwok/go.mod, CoreDNS in coredns/go.mod, metrics-server in
#   metrics-server/go.mod, kube-router in kube-router/go.mod, the Prometheus Operator in
#   prometheus-operator/go.mod, Prometheus in prometheus/go.mod); the output directories are keyed by those
#   versions: $LLMAZ_CACHE/bin/k8s-<v>/ (Kubernetes and etcd), bin/kwok-<v>/kwok, bin/lws-<v>/lws-controller,
#   bin/coredns-<v>/coredns, bin/metrics-server-<v>/metrics-server, bin/kube-router-<v>/kube-router,
#   bin/prometheus-operator-<v>/{operator,prometheus-config-reloader,bundle.yaml},
#   bin/prometheus-<upstream v>/{prometheus,promtool}.
# - A binary appears under its final name only when complete (built into a scratch dir, then renamed), so an
#   interrupted build is simply re-run. A lock serialises concurrent runs.
# - Nothing is rebuilt when the binary exists, and no binary is built at all when KUBEBUILDER_ASSETS names a
#   directory holding kube-apiserver and etcd (the envtest convention; llmaz_dev.envtest then uses those). The e2e
#   Kubernetes binaries are then still built into the cache unless that directory holds them too.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LLMAZ_CACHE:-$HOME/.cache/llmaz}"

module_version() { # <go.mod> <module path>
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

k8s_version="$(module_version "$here/go.mod" k8s.io/kubernetes)"
etcd_version="$(module_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
lws_version="$(module_version "$here/lws/go.mod" sigs.k8s.io/lws)"
kwok_version="$(module_version "$here/kwok/go.mod" sigs.k8s.io/kwok)"
coredns_version="$(module_version "$here/coredns/go.mod" github.com/coredns/coredns)"
metrics_server_version="$(module_version "$here/metrics-server/go.mod" sigs.k8s.io/metrics-server)"
kube_router_version="$(module_version "$here/kube-router/go.mod" github.com/cloudnativelabs/kube-router/v2)"
promop_module=github.com/prometheus-operator/prometheus-operator
promop_version="$(module_version "$here/prometheus-operator/go.mod" "$promop_module")"
prom_module_version="$(module_version "$here/prometheus/go.mod" github.com/prometheus/prometheus)"
# Prometheus 3.x is tagged v0.3XX.Y as a Go module: v0.305.0 is v3.5.0.
prom_minor="${prom_module_version#v0.}"
prom_version="v${prom_minor:0:1}.$((10#${prom_minor:1:2})).${prom_minor#*.}"
bin_dir="$cache/bin/k8s-$k8s_version"
lws_crd_dir="$cache/crd/lws-$lws_version"
kwok_bin="$cache/bin/kwok-$kwok_version/kwok"
lws_bin="$cache/bin/lws-$lws_version/lws-controller"
coredns_bin="$cache/bin/coredns-$coredns_version/coredns"
metrics_server_bin="$cache/bin/metrics-server-$metrics_server_version/metrics-server"
kube_router_bin="$cache/bin/kube-router-$kube_router_version/kube-router"
promop_dir="$cache/bin/prometheus-operator-$promop_version"
prom_dir="$cache/bin/prometheus-$prom_version"

e2e=false
node=false
prom_only=false
case "${1:-}" in
  --print) echo "$bin_dir"; exit 0 ;;
  --e2e) e2e=true ;;
  --node) e2e=true node=true ;;
  --prometheus) prom_only=true ;;
  "") ;;
  *) echo "usage: $0 [--e2e | --node | --print | --prometheus]" >&2; exit 2 ;;
esac

# k8s.io/kubernetes v1.X.Y pairs with staging modules v0.X.Y; a mismatch builds a franken-apiserver.
staging_version="v0.${k8s_version#v1.}"
mismatched="$(awk -v want="$staging_version" '$2 == "=>" && $1 ~ /^k8s\.io\// && $4 != want { print $1 " " $4 }' "$here/go.mod")"
if [[ -n "$mismatched" ]]; then
  echo "hack/cluster/go.mod: staging replace directives must all be $staging_version for k8s.io/kubernetes $k8s_version:" >&2
  echo "$mismatched" >&2
  exit 1
fi

mkdir -p "$bin_dir" "$lws_crd_dir"
exec 9>"$bin_dir/.lock"
flock 9

scratch="$(mktemp -d "$bin_dir/.build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# The operator and its config reloader (one `go build`: they share most packages), and the release's bundle.yaml:
# its CRDs, the operator's RBAC, ServiceAccount, Deployment and Service, as the release installs them.
build_prometheus_operator() {
  [[ -x "$promop_dir/operator" && -x "$promop_dir/prometheus-config-reloader" && -f "$promop_dir/bundle.yaml" ]] &&
    return
  echo "building the Prometheus Operator $promop_version into $promop_dir (~4 min from nothing)" >&2
  local module_dir
  module_dir="$(cd "$here/prometheus-operator" && go mod download -json "$promop_module" |
    awk -F'"' '$2 == "Dir" { print $4 }')"
  (cd "$here/prometheus-operator" && go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${promop_version#v}" -o "$scratch/" \
    "$promop_module/cmd/operator" "$promop_module/cmd/prometheus-config-reloader")
  cp "$module_dir/bundle.yaml" "$scratch/bundle.yaml"
  mkdir -p "$promop_dir"
  mv "$scratch/operator" "$scratch/prometheus-config-reloader" "$scratch/bundle.yaml" "$promop_dir/"
}
# prometheus, and promtool beside it (the alerting rules' checks and unit tests run it): one `go build` of the missing.
build_prometheus() {
  local cmd missing=()
  for cmd in prometheus promtool; do
    [[ -x "$prom_dir/$cmd" ]] || missing+=("github.com/prometheus/prometheus/cmd/$cmd")
  done
  ((${#missing[@]})) || return 0
  echo "building ${missing[*]##*/} $prom_version into $prom_dir (~4 min from nothing)" >&2
  (cd "$here/prometheus" && go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${prom_version#v}" -o "$scratch/" "${missing[@]}")
  mkdir -p "$prom_dir"
  for cmd in "${missing[@]##*/}"; do
    mv "$scratch/$cmd" "$prom_dir/$cmd"
  done
}
if $prom_only; then
  build_prometheus_operator
  build_prometheus
  echo "$promop_dir"
  echo "$prom_dir"
  exit 0
fi
minor="${k8s_version#v1.}"
minor="${minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

assets="${KUBEBUILDER_ASSETS:-}"
if [[ -n "$assets" && -x "$assets/kube-apiserver" && -x "$assets/etcd" ]]; then
  echo "using kube-apiserver and etcd from KUBEBUILDER_ASSETS=$assets" >&2
  bin_dir="$assets"
fi

# One `go build` for every missing Kubernetes binary: the shared packages compile once, in parallel.
k8s_missing=()
for cmd in kube-apiserver kubectl; do
  [[ -x "$bin_dir/$cmd" || "$bin_dir" == "$assets" ]] || k8s_missing+=("./cmd/$cmd")
done
k8s_out="$bin_dir"
if $e2e; then
  [[ "$bin_dir" == "$assets" && ! ( -x "$assets/kube-controller-manager" && -x "$assets/kube-scheduler" ) ]] &&
    k8s_out="$cache/bin/k8s-$k8s_version" && mkdir -p "$k8s_out"
  node_cmds=()
  $node && node_cmds=(kubelet kube-proxy)
  for cmd in kube-controller-manager kube-scheduler "${node_cmds[@]}"; do
    [[ -x "$bin_dir/$cmd" || -x "$k8s_out/$cmd" ]] || k8s_missing+=("./cmd/$cmd")
  done
fi
if ((${#k8s_missing[@]})); then
  echo "building ${k8s_missing[*]#./cmd/} $k8s_version (from nothing: ~10-20 min on 2 cores, +10 min for --e2e)" >&2
  (cd "$here" && go build -trimpath -ldflags "$k8s_ldflags" -o "$scratch/" "${k8s_missing[@]}")
  for path in "${k8s_missing[@]}"; do
    case "${path#./cmd/}" in
      kube-controller-manager | kube-scheduler | kubelet | kube-proxy) mv "$scratch/${path#./cmd/}" "$k8s_out/" ;;
      *) mv "$scratch/${path#./cmd/}" "$bin_dir/" ;;
    esac
  done
fi

if [[ ! -x "$bin_dir/etcd" && "$bin_dir" != "$assets" ]]; then
  echo "building etcd $etcd_version into $bin_dir" >&2
  (cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$scratch/etcd" .)
  mv "$scratch/etcd" "$bin_dir/etcd"
fi

lws_crd="leaderworkerset.x-k8s.io_leaderworkersets.yaml"
if [[ ! -f "$lws_crd_dir/$lws_crd" ]]; then
  lws_dir="$(cd "$here/lws" && go mod download -json sigs.k8s.io/lws | awk -F'"' '$2 == "Dir" { print $4 }')"
  cp "$lws_dir/config/crd/bases/$lws_crd" "$scratch/$lws_crd"
  mv "$scratch/$lws_crd" "$lws_crd_dir/$lws_crd"
fi

# kwok itself ships no stages (kwokctl passes them in): its "fast" node and pod stages are copied next to it.
kwok_stages="${kwok_bin%/*}/stages.yaml"
if $e2e && [[ ! -f "$kwok_stages" ]]; then
  kwok_dir="$(cd "$here/kwok" && go mod download -json sigs.k8s.io/kwok | awk -F'"' '$2 == "Dir" { print $4 }')"
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---" && cat "$kwok_dir/kustomize/stage/$stage.yaml"
  done >"$scratch/stages.yaml"
  mkdir -p "${kwok_bin%/*}" && mv "$scratch/stages.yaml" "$kwok_stages"
fi

if $e2e && [[ ! -x "$kwok_bin" ]]; then
  echo "building kwok $kwok_version into ${kwok_bin%/*}" >&2
  (cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$scratch/kwok" sigs.k8s.io/kwok/cmd/kwok)
  mkdir -p "${kwok_bin%/*}" && mv "$scratch/kwok" "$kwok_bin"
fi

if $e2e && [[ ! -x "$lws_bin" ]]; then
  echo "building the LeaderWorkerSet controller $lws_version into ${lws_bin%/*}" >&2
  (cd "$here/lws" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$lws_version" \
    -o "$scratch/lws-controller" sigs.k8s.io/lws/cmd)
  mkdir -p "${lws_bin%/*}" && mv "$scratch/lws-controller" "$lws_bin"
fi

if $node && [[ ! -x "$coredns_bin" ]]; then
  echo "building CoreDNS $coredns_version into ${coredns_bin%/*} (~3 min)" >&2
  (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$scratch/coredns" .)
  mkdir -p "${coredns_bin%/*}" && mv "$scratch/coredns" "$coredns_bin"
fi

# metrics-server reports its version through client-go's version package, as its own Makefile sets it.
if $node && [[ ! -x "$metrics_server_bin" ]]; then
  echo "building metrics-server $metrics_server_version into ${metrics_server_bin%/*} (~3 min)" >&2
  ms_ldflags="-s -w -X k8s.io/client-go/pkg/version.gitVersion=$metrics_server_version"
  ms_ldflags+=" -X k8s.io/client-go/pkg/version.gitTreeState=clean"
  ms_ldflags+=" -X k8s.io/client-go/pkg/version.buildDate=1970-01-01T00:00:00Z"
  (cd "$here/metrics-server" && go build -trimpath -ldflags "$ms_ldflags" -o "$scratch/metrics-server" \
    sigs.k8s.io/metrics-server/cmd/metrics-server)
  mkdir -p "${metrics_server_bin%/*}" && mv "$scratch/metrics-server" "$metrics_server_bin"
fi

if $node && [[ ! -x "$kube_router_bin" ]]; then
  echo "building kube-router $kube_router_version into ${kube_router_bin%/*} (~3 min)" >&2
  (cd "$here/kube-router" && go build -trimpath -ldflags "-s -w" -o "$scratch/kube-router" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router)
  mkdir -p "${kube_router_bin%/*}" && mv "$scratch/kube-router" "$kube_router_bin"
fi

echo "$bin_dir"
