"""What the manager caches of the kinds it does not define: only llmaz's own children, and only what is read.

A cluster's core Services, HPAs, NetworkPolicies and LeaderWorkerSets mostly belong to others. Their informers select
`app.kubernetes.io/managed-by=llmaz`, which the builders put on every child (`builders.meta.owned_metadata`), so
the manager holds its own children and nothing else whatever the size of the cluster. Model pods were already
selected by label (`indexes.MODEL_POD_SELECTOR`). Nodes and the pods bound to them are cached cluster-wide, in a
factory of their own, only by a manager whose `flavor-return-when-fits` has checked a return (`flavors.capacity`).

Children created before the label existed (by llmaz, or by an older llmaz for Python) are not in the cache. The
reconcile of their owner then sees no live child and applies the desired one, which carries the label: server-side
apply patches the existing object in place (same name, same owner reference; `force` takes over any field another
manager holds), so the child is relabelled, not re-created, and appears in the cache from the next event on. Every
owner is reconciled once at start, so an upgrade relabels every child at once, one apply each. The one child that is
never applied is an HPA whose Playground no longer wants one; `legacy.LegacyHpaRelabeler` labels those, once.

Transforms drop what no reader reads: managedFields except llmaz's own Apply entry (the apply no-op check reads it),
the `kubectl.kubernetes.io/last-applied-configuration` annotation, the status of Services and HPAs, and all but
the few pod and node fields diagnosis and the flavor fit read. llmaz's own kinds lose the same metadata (about 40 %
of a kubectl-applied OpenModel or Playground), which is why a status write never sends the cached managedFields
back (`common.write_status_if_changed`). The readers, which this list must follow:

- LeaderWorkerSets: `ServiceReconciler` (`apply_if_changed`: spec, metadata, llmaz's Apply managedFields;
  `service_status`: status conditions, replicas, hpaPodSelector); the Service controller's `owns` watch (owner
  reference; generation and status for its predicates).
- core Services: `ServiceReconciler` (`apply_if_changed` of `<name>-lb`: spec, metadata, llmaz's managedFields); the
  `owns` watch (owner reference, resourceVersion). Nobody reads their status.
- HPAs: `PlaygroundReconciler` (`apply_if_changed`; `is_controlled_by`: owner reference; uid for the delete
  precondition); the `owns` watch (owner reference, generation). Nobody reads their status.
- NetworkPolicies: `ServiceReconciler` (`apply_if_changed`; `is_controlled_by`: owner reference; uid for the
  delete precondition); the watch that wakes the Service named like a policy (owner reference, generation).
- model pods: `diagnose_pod` (name, deletionTimestamp; name, image and restartPolicy of containers and init
  containers, the env of init containers; status conditions and container statuses), `unusable_adapters` (the
  same), the `pod_service` index and `service_of_pod` (labels,
  namespace), `pod_finding_changed` (`diagnose_pod`), the flavor fallback (`flavors.decision.longest_waiting`:
  name, deletionTimestamp, the `PodScheduled` condition's status, reason, message and lastTransitionTime).
- pods bound to a node (the flavor fit's factory, `configure_fit_caches`): the `pod_node` index (nodeName),
  `fit.free_on` (phase; through `fit.pod_requests`: the resources of containers and init containers, the
  restartPolicy of init containers, pod-level resources, overhead).
- Nodes (the same factory): `flavors.capacity` (labels, for a flavor's nodeSelector), `fit.schedulable`
  (unschedulable, taints, the Ready condition's status), `fit.free_on` (allocatable).
- Playgrounds, inference Services, OpenModels, BackendRuntimes: the reconcilers (spec, metadata but managedFields
  and the last-applied annotation, status; of inference Services also llmaz's Apply managedFields, for the
  Playground's `apply_if_changed`), the webhooks' `CacheLookup` (OpenModels and BackendRuntimes: spec).
  llmaz-gateway runs its own informers.
- the InferencePool CRD (one object, by field selector): `pools.serves_pools` (name, served versions, conditions'
  types and statuses), stripped to that (`pools.strip_crd`).
- InferencePools (a factory of their own, once their CRD is served: `configure_pool_caches`), llmaz's only:
  `PlaygroundReconciler` (`apply_if_changed`; `is_controlled_by`; uid for the delete precondition); the watch that
  wakes the Playground named like a pool (owner reference, generation).
- EndpointSlices (two label-selected informers, `epp`): the gateway's picker slices in its namespace
  (`builders.epp.build_epp_slice`: addressType, ports, endpoints' addresses and conditions) and llmaz's mirrored
  slices (`apply_if_changed`; labels; uid for the delete precondition). Stripped as children are.
- Nodes: the scheduler extender (`llmaz.schedext`: name, labels), whose informer exists only when it is on. A Node's
  status (images, conditions, addresses) is most of its size, and nobody here reads it.
"""

from __future__ import annotations

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.controllers.pools import strip_crd
from llmaz.runtime.cache import FORBIDDEN, NOT_SERVED
from llmaz.runtime.cache.factory import SharedInformerFactory
from llmaz.runtime.cache.transform import Paths, applied_by, chain, drop_fields, keep_paths, strip_metadata

CHILD_SELECTOR = f"{c.MANAGED_BY_LABEL}={c.MANAGED_BY}"
CHILD_KINDS = (r.LEADER_WORKER_SETS, r.SERVICES, r.HORIZONTAL_POD_AUTOSCALERS, r.NETWORK_POLICIES)
LLMAZ_KINDS = (r.PLAYGROUNDS, r.INFERENCE_SERVICES, r.OPEN_MODELS, r.BACKEND_RUNTIMES)

strip_child = strip_metadata(keep_managed_fields=applied_by(c.FIELD_MANAGER))
strip_child_and_status = chain(strip_child, drop_fields("status"))

_CONTAINER: Paths = {"name": True, "image": True, "restartPolicy": True}
# An init container's env names the adapter it loads and where from (`diagnosis.unusable_adapters`).
_INIT_CONTAINER: Paths = {**_CONTAINER, "env": True}
POD_PATHS: Paths = {
    "apiVersion": True,
    "kind": True,
    "metadata": {
        "name": True,
        "namespace": True,
        "uid": True,
        "resourceVersion": True,
        "labels": True,
        "deletionTimestamp": True,
        "ownerReferences": True,
    },
    "spec": {"containers": _CONTAINER, "initContainers": _INIT_CONTAINER},
    "status": {"conditions": True, "containerStatuses": True, "initContainerStatuses": True},
}
strip_pod = keep_paths(POD_PATHS)
# The manager's own Node cache: the scheduler extender matches a flavor's nodeSelector against labels alone.
NODE_LABEL_PATHS: Paths = {
    "apiVersion": True,
    "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True, "labels": True},
}
strip_node_to_labels = keep_paths(NODE_LABEL_PATHS)

# The flavor fit's caches (`flavors.capacity`): what `fit.pod_requests` and `fit.free_on` read of a pod bound to a
# node, and what `fit.schedulable`, `fit.free_on` and a flavor's nodeSelector read of a Node.
BOUND_POD_PATHS: Paths = {
    "metadata": {"name": True, "namespace": True, "resourceVersion": True},
    "spec": {
        "nodeName": True,
        "containers": {"resources": True},
        "initContainers": {"resources": True, "restartPolicy": True},
        "resources": True,
        "overhead": True,
    },
    "status": {"phase": True},
}
NODE_PATHS: Paths = {
    "metadata": {"name": True, "resourceVersion": True, "labels": True},
    "spec": {"unschedulable": True, "taints": True},
    "status": {"allocatable": True, "conditions": {"type": True, "status": True}},
}
strip_bound_pod = keep_paths(BOUND_POD_PATHS)
strip_node = keep_paths(NODE_PATHS)

LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
LWS_MANIFESTS = f"https://github.com/kubernetes-sigs/lws/releases/download/{c.LWS_VERSION}/manifests.yaml"
LWS_FIX = (
    f"the LeaderWorkerSet CRD {LWS_CRD} is not installed: install LeaderWorkerSet {c.LWS_VERSION} with "
    f"`kubectl apply --server-side -f {LWS_MANIFESTS}`"
)
LLMAZ_CRD_FIX = (
    "llmaz's CRDs are not installed: `make deploy`, or `kubectl apply --server-side -k config/crd` from the "
    "llmaz repository"
)
RBAC_FIX = (
    "the manager's ServiceAccount lacks llmaz's RBAC rules: re-apply config/default (`make deploy`, or "
    "`kubectl apply --server-side -k config/default`)"
)
_READ = (
    r.PLAYGROUNDS,
    r.INFERENCE_SERVICES,
    r.OPEN_MODELS,
    r.BACKEND_RUNTIMES,
    r.LEADER_WORKER_SETS,
    r.SERVICES,
    r.HORIZONTAL_POD_AUTOSCALERS,
    r.PODS,
    r.CONFIG_MAPS,
    r.NODES,
    r.CUSTOM_RESOURCE_DEFINITIONS,
    r.ENDPOINT_SLICES,
    r.NETWORK_POLICIES,
)


def configure_caches(informers: SharedInformerFactory) -> None:
    """Scope and strip the child kinds and model pods, strip llmaz's kinds; register the fixes of the problems the
    manager can name. Call before any informer of these kinds is requested."""
    informers.configure(r.LEADER_WORKER_SETS, label_selector=CHILD_SELECTOR, transform=strip_child)
    informers.configure(r.SERVICES, label_selector=CHILD_SELECTOR, transform=strip_child_and_status)
    informers.configure(r.HORIZONTAL_POD_AUTOSCALERS, label_selector=CHILD_SELECTOR, transform=strip_child_and_status)
    informers.configure(r.NETWORK_POLICIES, label_selector=CHILD_SELECTOR, transform=strip_child)
    informers.configure(r.PODS, transform=strip_pod)
    informers.configure(r.NODES, transform=strip_node_to_labels)
    informers.configure(r.CUSTOM_RESOURCE_DEFINITIONS, transform=strip_crd)
    informers.configure(r.ENDPOINT_SLICES, transform=strip_child)
    for resource in LLMAZ_KINDS:
        informers.configure(resource, transform=strip_child)
    informers.add_fix_hint(r.LEADER_WORKER_SETS, NOT_SERVED, LWS_FIX)
    for resource in LLMAZ_KINDS:
        informers.add_fix_hint(resource, NOT_SERVED, LLMAZ_CRD_FIX)
    for resource in _READ:
        informers.add_fix_hint(resource, FORBIDDEN, RBAC_FIX)


def configure_pool_caches(informers: SharedInformerFactory) -> None:
    """Select llmaz's InferencePools and strip them as the other children, in their own factory (`pools`)."""
    informers.configure(r.INFERENCE_POOLS, label_selector=CHILD_SELECTOR, transform=strip_child)
    informers.add_fix_hint(r.INFERENCE_POOLS, FORBIDDEN, RBAC_FIX)


def configure_fit_caches(informers: SharedInformerFactory) -> None:
    """Strip the Nodes and bound pods of the flavor fit's own factory (`flavors.capacity`), and say what fixes a
    list they are forbidden."""
    informers.configure(r.NODES, transform=strip_node)
    informers.configure(r.PODS, transform=strip_bound_pod)
    for resource in (r.NODES, r.PODS):
        informers.add_fix_hint(resource, FORBIDDEN, RBAC_FIX)
