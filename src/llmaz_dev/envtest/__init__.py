"""A real Kubernetes control plane (etcd + kube-apiserver on loopback) for tests and local runs.

    from llmaz_dev.envtest import ControlPlane

    with ControlPlane(crd_paths=[Path("config/crd/bases")]) as cluster:
        cluster.kubectl("get", "crds")              # the pinned kubectl, this cluster's kubeconfig
        token = cluster.service_account_token("default", "reader")
        cluster.restart_apiserver()                 # same port, same etcd
        cluster.compact_etcd()                      # older resourceVersions now get 410

Binaries come from KUBEBUILDER_ASSETS or from the build cache filled by `make cluster-bins` (see `_assets`).
For pytest, enable the fixtures with `pytest_plugins = ["llmaz_dev.envtest.pytest_plugin"]`. With
`USE_EXISTING_CLUSTER=true`, the fixtures use the cluster named by KUBECONFIG instead (`ExistingCluster`).
No production module imports this package.
"""

from llmaz_dev.envtest._assets import AssetsMissingError, ClusterAssets, find_assets, kubernetes_version
from llmaz_dev.envtest._cluster import Cluster, ClusterOperationError
from llmaz_dev.envtest._existing import ExistingCluster
from llmaz_dev.envtest.control_plane import ControlPlane, ControlPlaneError

__all__ = [
    "AssetsMissingError",
    "Cluster",
    "ClusterAssets",
    "ClusterOperationError",
    "ControlPlane",
    "ControlPlaneError",
    "ExistingCluster",
    "find_assets",
    "kubernetes_version",
]
