"""The InferencePools of the Playgrounds that ask for one (`llmaz.apis.pools`), and whether the cluster serves them.

InferencePool is another project's API (the Gateway API Inference Extension): many clusters do not have its CRD,
and the manager must run, be ready and serve Playgrounds there all the same. So nothing about pools is part of the
manager's start-up:

- Whether the CRD is served comes from a watch of the one CustomResourceDefinition
  `inferencepools.inference.networking.k8s.io` (a field-selected informer of the manager's factory: CRDs are always
  served, so it syncs at start, and it holds at most one object, stripped to its name, served versions and
  conditions). The pool is served once that CRD is `Established` with version v1 served. The Playground
  controller watches the same informer: the CRD's creation, its establishment and its deletion wake every
  Playground that asks for a pool (or reports on one), so a Playground waiting with `InferencePoolCRDMissing` gets
  its pool as soon as the CRD is installed, with no polling and no retry loop while it is absent. Discovery
  refreshed on a period was the alternative; it would poll forever on the clusters that never install the CRD and
  still answer late.
- The pools themselves are cached by an informer requested the first time the CRD is seen served, from a factory of
  its own (`pool_informers`, outside the start-up sync and the "informers" readiness check, as the flavor fit's
  nodes are): an informer of a resource that is not served would hold back the Playground controller's start and
  turn readiness false. It selects llmaz's managed-by label, like every child cache, and its events wake the
  Playground named like the pool (`attach`), as the other children's watches do. Until it has synced, and for a
  pool without the label (someone else's, in the way), `live_child` reads the API server.
  Should the CRD be deleted and installed again, the informer keeps its last pools until its next list succeeds;
  that list's deletions wake their Playgrounds, which then create their pools again.

Ownership: a pool is written only when it is absent or controlled by the Playground (or by an earlier Playground of
its name, a leftover, see builders/ownership.py); any other pool of the name is left alone and reported as
`InferencePool=False`/`InferencePoolConflict`. A pool is deleted only when the Playground controls it (uid
precondition) and no longer asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.conditions import find_condition
from llmaz.apis.pools import wants_pool
from llmaz.runtime.cache import Obj, SharedInformerFactory, Store
from llmaz.runtime.cache.interfaces import Informer
from llmaz.runtime.cache.transform import Paths, keep_paths
from llmaz.runtime.controller import Request
from llmaz.runtime.controller.handler import EnqueueHandler, RequestQueue
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.log import get_logger

INFERENCE_POOL_CRD = f"{r.INFERENCE_POOLS.plural}.{r.INFERENCE_POOLS.group}"
CRD_FIELD_SELECTOR = f"metadata.name={INFERENCE_POOL_CRD}"
# What `serves_pools` reads of the CRD.
CRD_PATHS: Paths = {
    "apiVersion": True,
    "kind": True,
    "metadata": {"name": True, "uid": True, "resourceVersion": True},
    "spec": {"versions": {"name": True, "served": True}},
    "status": {"conditions": {"type": True, "status": True}},
}
strip_crd = keep_paths(CRD_PATHS)

_log = get_logger("llmaz.controllers.pools")


def serves_pools(crd: Obj | None) -> bool:
    """Whether the InferencePool CRD `crd` (None: absent) is established and serves version v1."""
    if crd is None:
        return False
    established = find_condition((crd.get("status") or {}).get("conditions"), "Established") or {}
    versions = (crd.get("spec") or {}).get("versions") or []
    served = any(v.get("name") == r.INFERENCE_POOLS.version and v.get("served") for v in versions)
    return established.get("status") == "True" and served


def reports_on_pool(obj: Obj) -> bool:
    """Whether a Playground asks for a pool or carries the `InferencePool` condition (which a change of the CRD may
    change)."""
    meta = obj.get("metadata") or {}
    conditions = (obj.get("status") or {}).get("conditions")
    return wants_pool(meta.get("annotations")) or find_condition(conditions, c.CONDITION_INFERENCE_POOL) is not None


def playgrounds_reporting_on_pools(playgrounds: Store) -> Callable[[Obj], list[Request]]:
    """A mapper for CRD events: every Playground that asks for a pool or reports on one."""

    def map_playgrounds(_crd: Obj) -> list[Request]:
        return [
            Request((obj.get("metadata") or {}).get("namespace") or "", obj["metadata"]["name"])
            for obj in playgrounds.list()
            if reports_on_pool(obj)
        ]

    return map_playgrounds


class InferencePools:
    """Whether InferencePools are served, and their cache once they are (see the module)."""

    def __init__(
        self,
        crds: Store,
        pool_informers: SharedInformerFactory,
        mapper: Callable[[Obj], Any],
        predicates: Sequence[Predicate] = (),
    ) -> None:
        self._crds = crds
        self._pool_informers = pool_informers
        self._mapper = mapper
        self._predicates = tuple(predicates)
        self._queue: RequestQueue | None = None
        self._informer: Informer | None = None

    def attach(self, queue: RequestQueue) -> None:
        """Wake the keys on `queue` that pool events map to (the Playground controller's queue)."""
        self._queue = queue

    def served(self) -> bool:
        return serves_pools(self._crds.get(INFERENCE_POOL_CRD))

    def store(self) -> Store | None:
        """The pool cache, requested on the first call that finds the CRD served; None while it is not."""
        if not self.served():
            return None
        if self._informer is None:
            _log.info("caching llmaz's InferencePools: their CRD is served", crd=INFERENCE_POOL_CRD)
            self._informer = self._pool_informers.informer_for(r.INFERENCE_POOLS)
            if self._queue is not None:
                self._informer.add_event_handler(EnqueueHandler(self._mapper, self._queue, self._predicates))
        return self._informer.store
