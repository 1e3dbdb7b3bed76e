"""Where the node's binaries live: kubelet and kube-proxy beside the other Kubernetes binaries, CoreDNS,
metrics-server and kube-router each in a cache directory of its own, keyed by version (all built by
`make node-bins`, i.e. `hack/cluster/build.sh --node`).

Nothing here builds anything; a missing binary is reported with the command that provides it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmaz_dev.envtest._assets import all_files, cache_root, checkout_root, kubernetes_version, module_version

_BUILD_HINT = "run `make node-bins` (hack/cluster/build.sh --node)"


@dataclass(frozen=True)
class NodeAssets:
    kubelet: Path
    kube_proxy: Path
    coredns: Path
    metrics_server: Path
    kube_router: Path


def find_node_assets() -> NodeAssets:
    root = checkout_root(_BUILD_HINT)
    k8s_dir = cache_root() / "bin" / f"k8s-{kubernetes_version()}"
    coredns_version = module_version(root / "hack/cluster/coredns/go.mod", "github.com/coredns/coredns")
    metrics_server_version = module_version(root / "hack/cluster/metrics-server/go.mod", "sigs.k8s.io/metrics-server")
    kube_router_version = module_version(
        root / "hack/cluster/kube-router/go.mod", "github.com/cloudnativelabs/kube-router/v2"
    )
    assets = NodeAssets(
        kubelet=k8s_dir / "kubelet",
        kube_proxy=k8s_dir / "kube-proxy",
        coredns=cache_root() / "bin" / f"coredns-{coredns_version}" / "coredns",
        metrics_server=cache_root() / "bin" / f"metrics-server-{metrics_server_version}" / "metrics-server",
        kube_router=cache_root() / "bin" / f"kube-router-{kube_router_version}" / "kube-router",
    )
    return all_files(assets, _BUILD_HINT)
