"""The node tier: one real Kubernetes node on this machine, where pods really run.

    from llmaz_dev.envtest.node import NodeCluster
    from llmaz_dev.envtest.images import find_images

    images = find_images(["pause", "manager", "loader"])
    with NodeCluster(sandbox_image=images["pause"], images=list(images.values()),
                     crd_paths=[Path("config/crd/bases")]) as cluster:
        cluster.kubectl("get", "nodes")   # llmaz-node Ready

Needs root, the Debian packages of `hack/node/packages.txt` (`make node-packages`), the binaries of
`make node-bins` and the images of `make image-build`. One node per machine. Start it by hand with
`python -m llmaz_dev.envtest.node`; `python -m llmaz_dev.envtest.node clean` removes what a crashed run left.
"""

from llmaz_dev.envtest.node._assets import NodeAssets, find_node_assets
from llmaz_dev.envtest.node._host import PrerequisiteError
from llmaz_dev.envtest.node._layout import NodeLayout, NodePorts
from llmaz_dev.envtest.node.cluster import NodeCluster

__all__ = ["NodeAssets", "NodeCluster", "NodeLayout", "NodePorts", "PrerequisiteError", "find_node_assets"]
