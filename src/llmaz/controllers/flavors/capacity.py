"""The cluster's nodes and the pods bound to them, from informers, for the room a flavor's nodes have.

Only `flavor-return-when-fits` reads them, and it is off by default: the two informers are requested the first
time a return is checked, so a manager that never checks one holds neither. From then on they stay (a later
`false` does not shrink the cache). While they fill, `synced` is False and the caller looks again shortly.

They come from a factory of their own (`controllers.setup`), not the manager's: an informer requested while the
manager runs would otherwise turn its readiness ("informers") false until it has synced, and with it the webhooks'
endpoints. What is cached is stripped (`caches.configure_fit_caches`): of a Node its labels, `unschedulable`,
taints, allocatable and conditions' types and statuses; of a pod its node, phase and what `fit.pod_requests`
reads. Only pods bound to a node and not ended are listed and watched (`BOUND_POD_SELECTOR`: kube-scheduler's own
pod informer selects the phases the same way); pending pods take nothing from a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmaz.apis import resources as r
from llmaz.controllers.flavors.fit import Resources, Room, room_on
from llmaz.runtime.cache import Informer, Obj
from llmaz.runtime.controller import InformerSource
from llmaz.runtime.log import get_logger

BOUND_POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
POD_NODE = "llmaz.io/pod-node"

_log = get_logger("llmaz.controllers.flavors")


def pod_node(obj: Obj) -> list[str]:
    """An index function: the name of the node a pod is bound to."""
    name = (obj.get("spec") or {}).get("nodeName")
    return [str(name)] if name else []


def _has_labels(node: Obj, selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


class NodeCapacity:
    """The room on a flavor's nodes, read from the node and bound-pod informers of `informers`."""

    def __init__(self, informers: InformerSource) -> None:
        self._informers = informers
        self._nodes: Informer | None = None
        self._pods: Informer | None = None

    def synced(self) -> bool:
        """Whether the nodes and bound pods are cached; the first call requests the informers."""
        if self._nodes is None or self._pods is None:
            _log.info("caching nodes and the pods bound to them, for flavor-return-when-fits")
            self._nodes = self._informers.informer_for(r.NODES)
            self._pods = self._informers.informer_for(r.PODS, field_selector=BOUND_POD_SELECTOR)
            self._pods.add_indexers({POD_NODE: pod_node})
        return self._nodes.has_synced() and self._pods.has_synced()

    def room(
        self, request: Resources, node_selector: Mapping[str, str] | None, tolerations: Sequence[Mapping[str, Any]]
    ) -> Room:
        """The room for pods requesting `request` on the nodes with `node_selector`'s labels (after `synced`)."""
        if self._nodes is None or self._pods is None:
            raise RuntimeError("NodeCapacity.room before synced(): the informers were never requested")
        nodes = [node for node in self._nodes.store.list() if _has_labels(node, node_selector or {})]
        pods = self._pods.store
        bound = {name: pods.by_index(POD_NODE, name) for node in nodes if (name := node["metadata"]["name"])}
        return room_on(request, nodes, bound, tolerations)
