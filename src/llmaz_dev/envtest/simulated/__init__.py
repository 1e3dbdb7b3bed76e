"""A simulated multi-node cluster for the e2e tier: real Kubernetes components, no containers.

    from llmaz_dev.envtest.simulated import SimulatedCluster, NodePool

    with SimulatedCluster(crd_paths=[Path("config/crd/bases")]) as cluster:
        cluster.kubectl("get", "nodes")   # gpu-a100-0 ... cpu-1, all Ready

What runs: etcd and kube-apiserver (`ControlPlane`), kube-controller-manager (garbage collection, namespaces,
ServiceAccounts and tokens, StatefulSets, ReplicaSets, Deployments, Endpoints/EndpointSlices, HPA),
kube-scheduler, kwok (fake nodes and kubelets: pods become Running and Ready) and the LeaderWorkerSet controller
with its webhooks. Binaries: `make cluster-bins e2e-bins`. Start it by hand with `python -m
llmaz_dev.envtest.simulated`.
"""

from llmaz_dev.envtest.simulated._assets import SimulatedAssets, find_simulated_assets
from llmaz_dev.envtest.simulated.cluster import SimulatedCluster
from llmaz_dev.envtest.simulated.nodes import GPU_PRODUCT_LABEL, GPU_RESOURCE, NodePool, default_node_pools

__all__ = [
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "NodePool",
    "SimulatedAssets",
    "SimulatedCluster",
    "default_node_pools",
    "find_simulated_assets",
]
