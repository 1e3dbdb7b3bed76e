"""Wire the four llmaz controllers into a manager: their watches, indexes and predicates.

Watches (each change wakes only the objects it concerns, with their namespace):
- Playground <- Playground; the inference Service and the HPA named like it (creation, deletion, spec or
  controller changes, and the Service's status); OpenModels it claims (spec changes, and changes of their opt-in
  to serving across namespaces) and the BackendRuntime it names (through cache indexes); every other Playground
  and inference Service serving its model (creation, deletion, change of model: which namespace the model is
  routed to follows them).
- Service <- Service; the LeaderWorkerSet and `-lb` Service named like it (status, spec or controller changes);
  the NetworkPolicy named like it (spec or controller changes, deletion: a deleted policy is applied again);
  OpenModels it claims; the global ConfigMap (every Service, since the settings shape them all); its
  LeaderWorkerSet's pods (only llmaz model pods are cached, by label selector; only changes of why a pod is not
  ready pass).
  The InferencePool CRD (created, established, deleted): every Playground that asks for a pool or reports on one;
  its InferencePool (llmaz's, once the CRD is served, from a factory of its own: `pools`).
- The endpoint picker's mirror (`epp`), one key per namespace <- Playgrounds (created, deleted, or changing whether
  they ask for a pool), the InferencePool CRD and the gateway's picker slices (every namespace with a Playground
  asking, or a mirror), the mirrored Service and slice (their namespace).
- OpenModel, BackendRuntime <- themselves (spec changes) for their `Ready` condition.

Children are mapped to their owner by name, not through owner references (`owns`): a user's object that stands
in the way of a child has no reference to the owner, and its deletion must still wake the owner at once (the
owner also retries with the rate limiter's backoff while it is blocked; see builders/ownership.py).

Caches (`caches`): core Services, HPAs and LeaderWorkerSets only with llmaz's managed-by label, stripped of what no
reader reads; what fixes a resource that is not served (the LeaderWorkerSet CRD, llmaz's CRDs) or not allowed is
registered with the informers, which log it once and serve it on /readyz. The global ConfigMap's absence is said
the same way (`globalconfig`, readiness check "global-config"), and HPAs from before the label are relabelled once
per leadership (`legacy`). Nodes and the pods bound to them are cached only for `flavor-return-when-fits`, from its
first check on, by a second factory outside the start-up sync and readiness (`flavors.capacity`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.apis.serving import LB_SERVICE_SUFFIX
from llmaz.controllers import indexes as ix
from llmaz.controllers.caches import configure_caches, configure_fit_caches, configure_pool_caches
from llmaz.controllers.common import ParentReconciler
from llmaz.controllers.epp import EppMirror, asking_changed
from llmaz.controllers.flavors.capacity import NodeCapacity
from llmaz.controllers.globalconfig import GlobalConfig
from llmaz.controllers.legacy import LegacyHpaRelabeler
from llmaz.controllers.playground import PlaygroundReconciler
from llmaz.controllers.pools import (
    CRD_FIELD_SELECTOR,
    INFERENCE_POOL_CRD,
    InferencePools,
    playgrounds_reporting_on_pools,
)
from llmaz.controllers.readiness import backend_reconciler, model_reconciler
from llmaz.controllers.service import ServiceReconciler
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.cache import SharedInformerFactory
from llmaz.runtime.controller import Controller, ControllerBuilder, Scope
from llmaz.runtime.controller import predicate as p
from llmaz.runtime.manager import Manager
from llmaz.runtime.rbac import READ, allow

SPEC_OR_STATUS = p.or_(p.generation_changed(), p.status_changed())
SPEC = p.generation_changed()
CHILD_SPEC = p.or_(SPEC, ix.controller_changed())
CHILD_SPEC_OR_STATUS = p.or_(SPEC_OR_STATUS, ix.controller_changed())
RESOURCE_VERSION = p.resource_version_changed()

# The informers created below: each watched kind is read cluster-wide, except the one global ConfigMap.
RBAC_RULES = (
    allow(r.PLAYGROUNDS, *READ),
    allow(r.INFERENCE_SERVICES, *READ),
    allow(r.OPEN_MODELS, *READ),
    allow(r.BACKEND_RUNTIMES, *READ),
    allow(r.HORIZONTAL_POD_AUTOSCALERS, *READ),
    allow(r.LEADER_WORKER_SETS, *READ),
    allow(r.SERVICES, *READ),
    allow(r.NETWORK_POLICIES, *READ),
    allow(r.PODS, *READ),
    allow(r.CONFIG_MAPS, *READ, names=(c.GLOBAL_CONFIG_NAME,), own_namespace=True),
    # The endpoint picker's mirror (`epp`): the gateway's picker slices, and llmaz's mirrored slices.
    allow(r.ENDPOINT_SLICES, *READ),
    # Whether the cluster serves InferencePools: the one CRD, by name (`pools`).
    allow(r.CUSTOM_RESOURCE_DEFINITIONS, *READ, names=(INFERENCE_POOL_CRD,)),
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    namespace: str = c.GLOBAL_CONFIG_NAMESPACE
    """Namespace of the manager, where the global ConfigMap lives and llmaz-gateway runs (config/default, the chart
    put both there). Default llmaz-system."""
    max_concurrent_reconciles: int = 1
    reconcile_timeout: float = 60.0
    """Seconds a reconcile may take before it is cancelled and retried; 0: no limit. Default 60 s."""


def setup_controllers(manager: Manager, options: ControllerSettings | None = None) -> list[Controller]:
    """Build the four controllers, register them with `manager`, and return them."""
    opts = options or ControllerSettings()
    informers, clock = manager.informers, manager.options.clock
    configure_caches(informers)
    playgrounds = informers.informer_for(r.PLAYGROUNDS)
    services = informers.informer_for(r.INFERENCE_SERVICES)
    playgrounds.add_indexers({ix.PLAYGROUND_MODELS: ix.playground_models, ix.PLAYGROUND_BACKEND: ix.playground_backend})
    services.add_indexers({ix.SERVICE_MODELS: ix.service_models})
    ix.add_serving_indexes(playgrounds, services)
    pod_scope = Scope(label_selector=ix.MODEL_POD_SELECTOR)
    informers.informer_for(r.PODS, label_selector=pod_scope.label_selector).add_indexers(
        {ix.POD_SERVICE: ix.pod_service}
    )
    settings = SettingsHolder()
    config_scope = Scope(namespace=opts.namespace, field_selector=f"metadata.name={c.GLOBAL_CONFIG_NAME}")
    config_informer = informers.informer_for(
        r.CONFIG_MAPS, config_scope.namespace, field_selector=config_scope.field_selector
    )
    global_config = GlobalConfig(settings, opts.namespace, config_informer)
    # Registered before the Service controller's own handler, so settings are current when Services are enqueued.
    config_informer.add_event_handler(global_config)
    manager.add(global_config)
    manager.add_readyz_check("global-config", global_config.check)
    manager.add(LegacyHpaRelabeler(manager.leader_client))
    workers, timeout = opts.max_concurrent_reconciles, opts.reconcile_timeout
    # The flavor fit's nodes and bound pods, requested on first use: in a factory of their own, outside the start-up
    # sync and the "informers" readiness check (see flavors.capacity).
    fit_informers = SharedInformerFactory(manager.client, clock=clock)
    configure_fit_caches(fit_informers)
    manager.add(fit_informers)
    # InferencePools, another project's API, cached only once their CRD is served (see `pools`).
    crd_scope = Scope(field_selector=CRD_FIELD_SELECTOR)
    crds = informers.informer_for(r.CUSTOM_RESOURCE_DEFINITIONS, field_selector=crd_scope.field_selector)
    pool_informers = SharedInformerFactory(manager.client, clock=clock)
    configure_pool_caches(pool_informers)
    manager.add(pool_informers)
    pools = InferencePools(crds.store, pool_informers, ix.owner_named_like(playgrounds.store), [CHILD_SPEC])

    def parent(
        watching: ControllerBuilder, reconciler: Callable[..., ParentReconciler[Any]], reporting: str
    ) -> Controller:
        """A Playground or Service controller: leader-elected, with the workers and timeout asked for."""
        events = manager.event_recorder(reporting)
        return watching.with_options(max_concurrent_reconciles=workers, reconcile_timeout=timeout).build(
            reconciler(manager.leader_client, informers, events, clock, settings), informers
        )

    controllers = [
        parent(
            ControllerBuilder("playground")
            .for_(r.PLAYGROUNDS)
            .watches(r.HORIZONTAL_POD_AUTOSCALERS, ix.owner_named_like(playgrounds.store), predicates=[CHILD_SPEC])
            .watches(r.INFERENCE_SERVICES, ix.owner_named_like(playgrounds.store), predicates=[CHILD_SPEC_OR_STATUS])
            .watches(
                r.OPEN_MODELS,
                ix.users_of(playgrounds.store, ix.PLAYGROUND_MODELS),
                predicates=[p.or_(SPEC, ix.serving_opt_in_changed())],
            )
            .watches(r.BACKEND_RUNTIMES, ix.users_of(playgrounds.store, ix.PLAYGROUND_BACKEND), predicates=[SPEC])
            # Which namespace a model is routed to follows every claimant of it (`ModelRouted`).
            .watches(r.PLAYGROUNDS, ix.claimants_of(playgrounds.store), predicates=[ix.claims_changed()])
            .watches(r.INFERENCE_SERVICES, ix.claimants_of(playgrounds.store), predicates=[ix.claims_changed()])
            .watches(
                r.CUSTOM_RESOURCE_DEFINITIONS,
                playgrounds_reporting_on_pools(playgrounds.store),
                predicates=[RESOURCE_VERSION],
                scope=crd_scope,
            ),
            functools.partial(PlaygroundReconciler, pools=pools),
            "playground-controller",
        ),
        parent(
            ControllerBuilder("service")
            .for_(r.INFERENCE_SERVICES)
            .watches(r.LEADER_WORKER_SETS, ix.owner_named_like(services.store), predicates=[CHILD_SPEC_OR_STATUS])
            .watches(r.SERVICES, ix.owner_named_like(services.store, LB_SERVICE_SUFFIX), predicates=[RESOURCE_VERSION])
            .watches(r.NETWORK_POLICIES, ix.owner_named_like(services.store), predicates=[CHILD_SPEC])
            .watches(r.OPEN_MODELS, ix.users_of(services.store, ix.SERVICE_MODELS), predicates=[SPEC])
            .watches(r.CONFIG_MAPS, ix.everything_in(services.store), scope=config_scope)
            .watches(r.PODS, ix.service_of_pod, predicates=[ix.pod_finding_changed()], scope=pod_scope),
            functools.partial(
                ServiceReconciler, capacity=NodeCapacity(fit_informers), gateway_namespace=opts.namespace
            ),
            "service-controller",
        ),
        ControllerBuilder("openmodel")
        .for_(r.OPEN_MODELS, predicates=[SPEC])
        .with_options(reconcile_timeout=timeout)
        .build(model_reconciler(manager.leader_client, informers.informer_for(r.OPEN_MODELS).store, clock), informers),
        ControllerBuilder("backendruntime")
        .for_(r.BACKEND_RUNTIMES, predicates=[SPEC])
        .with_options(reconcile_timeout=timeout)
        .build(
            backend_reconciler(manager.leader_client, informers.informer_for(r.BACKEND_RUNTIMES).store, clock),
            informers,
        ),
    ]
    mirror = EppMirror(manager.leader_client, informers, pools, opts.namespace)
    controllers.append(
        ControllerBuilder("epp-mirror")
        .watches(r.PLAYGROUNDS, mirror.namespace_of(), predicates=[asking_changed()])
        .watches(
            r.CUSTOM_RESOURCE_DEFINITIONS, mirror.every_namespace(), predicates=[RESOURCE_VERSION], scope=crd_scope
        )
        .watches(r.ENDPOINT_SLICES, mirror.every_namespace(), predicates=[RESOURCE_VERSION], scope=mirror.source_scope)
        .watches(r.ENDPOINT_SLICES, mirror.namespace_of(), predicates=[RESOURCE_VERSION], scope=mirror.mirror_scope)
        .watches(r.SERVICES, mirror.namespace_of(c.EPP_SERVICE_NAME), predicates=[RESOURCE_VERSION])
        .with_options(reconcile_timeout=timeout)
        .build(mirror, informers)
    )
    pools.attach(controllers[0].queue)
    for controller in controllers:
        manager.add(controller)
    return controllers
