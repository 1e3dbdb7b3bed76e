"""The simulated nodes: pools of kwok-managed Nodes with the capacity and labels of real accelerator machines.

Invariants:
- Every Node carries the annotation `kwok.x-k8s.io/node: fake`, the only selector kwok manages nodes by, and
  the label `type: kwok`; none is tainted, so pods need no toleration to land on them.
- Node names are `<pool>-<index>`; each Node gets its own /24 pod CIDR out of 10.244.0.0/16 (so at most 256
  nodes), from which kwok assigns pod IPs.
- Capacity equals allocatable: kube-scheduler fits pods against exactly the resources a pool declares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_MAX_NODES = 256
_BASE_RESOURCES = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


@dataclass(frozen=True)
class NodePool:
    """`count` identical nodes: base CPU/memory/pods plus `extra_resources` (accelerators) and `labels`."""

    name: str
    count: int
    labels: Mapping[str, str] = field(default_factory=dict)
    extra_resources: Mapping[str, str] = field(default_factory=dict)

    def resources(self) -> dict[str, str]:
        return {**_BASE_RESOURCES, **self.extra_resources}


def default_node_pools() -> list[NodePool]:
    """Two 8-GPU A100 nodes, two 2-GPU A10 nodes and two CPU-only nodes."""
    return [
        NodePool("gpu-a100", 2, {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}, {GPU_RESOURCE: "8"}),
        NodePool("gpu-a10", 2, {GPU_PRODUCT_LABEL: "NVIDIA-A10"}, {GPU_RESOURCE: "2"}),
        NodePool("cpu", 2),
    ]


def node_manifests(pools: Sequence[NodePool]) -> list[dict[str, Any]]:
    """The Node objects for `pools`, in pool order; raise ValueError for more nodes than pod CIDRs."""
    names = [f"{pool.name}-{index}" for pool in pools for index in range(pool.count)]
    if len(names) > _MAX_NODES:
        raise ValueError(f"{len(names)} nodes requested; at most {_MAX_NODES} fit the pod CIDR")
    if len(set(names)) != len(names):
        raise ValueError(f"node names collide: {names}")
    manifests: list[dict[str, Any]] = []
    for pool in pools:
        for index in range(pool.count):
            manifests.append(_node(pool, f"{pool.name}-{index}", len(manifests)))
    return manifests


def _node(pool: NodePool, name: str, ordinal: int) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "llmaz.io/e2e-node-pool": pool.name,
        **pool.labels,
    }
    cidr = f"10.244.{ordinal}.0/24"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"capacity": pool.resources(), "allocatable": pool.resources()},
    }
