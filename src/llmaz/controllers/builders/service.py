"""Inference Service -> desired LeaderWorkerSet (same name) and load-balancing core Service `<name>-lb`.

Invariants:
- Inputs are typed and read-only (templates are deep-copied); `models` is main-first and non-empty.
- Outputs are apply-ready dicts owned by the Service (controller reference), deterministic, without `None` or
  `creationTimestamp`.
- "Multi-host" means the Service has a leaderTemplate. Model, label and flavor injection then apply to BOTH
  templates; llmaz labelled only the leader, while its own validation read the worker's labels.
- Every pod template is confined by `security.harden` (`model-pod-security` of the global config): pod-level seccomp
  and service-account token, the runners' and loaders' security contexts, filling only what the template leaves
  unset.
- `restartPolicy` and `subGroupPolicy` are carried to the LeaderWorkerSet (llmaz dropped them: silently ignored).
- The startup policy is `LeaderReady` (llmaz's) for a single-host Service and `LeaderCreated` for a multi-host one:
  a multi-host leader's engine starts only once its workers answer (llama.cpp's `--rpc`, SGLang's `--nnodes`), so
  waiting for the leader to be Ready before creating the workers never ends.
- The `-lb` Service is a complete desired object, meant to be applied on every reconcile (llmaz created it once,
  so its port, selector and annotation drifted, and a deleted one came back only by chance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmaz.apis import OpenModel, Service
from llmaz.apis import constants as c
from llmaz.apis.serving import lb_service_name
from llmaz.controllers.builders.adapters import adapter_paths, left_out_adapters
from llmaz.controllers.builders.flavors import find_flavor, flavor_order
from llmaz.controllers.builders.inject import inject_flavor, inject_labels, inject_models, names_path
from llmaz.controllers.builders.merge import json_copy
from llmaz.controllers.builders.meta import apply_ready, owned_metadata
from llmaz.controllers.builders.models import require_models, skip_model_loader
from llmaz.controllers.builders.security import PodOptions, harden

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
# What the Service CRD defaults a present rollingUpdateConfiguration to.
DEFAULT_MAX_UNAVAILABLE = 1
DEFAULT_MAX_SURGE = 0
# LeaderWorkerSet startup policies: the workers are created once the leader is Ready, or with it.
LEADER_READY = "LeaderReady"
LEADER_CREATED = "LeaderCreated"


def _owned(service: Service, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return owned_metadata(name, service.metadata, c.INFERENCE_API_VERSION, Service.KIND, annotations)


def _rollout_strategy(strategy: dict[str, Any] | None) -> dict[str, Any] | None:
    if strategy is None:
        return None
    result: dict[str, Any] = {"type": strategy.get("type") or "RollingUpdate"}
    rolling = strategy.get("rollingUpdateConfiguration")
    if rolling is not None:
        result["rollingUpdateConfiguration"] = {
            "maxSurge": rolling.get("maxSurge", DEFAULT_MAX_SURGE),
            "maxUnavailable": rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE),
        }
    return result


def _templates(service: Service) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    workload = service.spec.workload_template
    leader = workload.get("leaderTemplate")
    worker = workload.get("workerTemplate")
    return json_copy(leader) if leader is not None else None, json_copy(worker or {})


def is_multi_host(service: Service) -> bool:
    """Whether the Service runs a leader with workers of another template (it has a leaderTemplate)."""
    return service.spec.workload_template.get("leaderTemplate") is not None


def claimed_flavors(service: Service) -> list[str] | None:
    claims = service.spec.model_claims
    return claims.inference_flavors if claims is not None else None


def _left_out(
    service: Service, main: OpenModel, skip: bool, templates: Sequence[dict[str, Any] | None]
) -> frozenset[str]:
    """The unavailable adapters whose path no container names any more: their loaders would only fail again.
    While an engine still names one (a Playground that has not yet dropped its flag, or a hand-written Service's
    own arguments) its loader stays, so the pods never start an engine on a path that is not there."""
    paths = adapter_paths(main, skip)
    return frozenset(
        name
        for name in left_out_adapters(service, main)
        if not any(names_path(template, paths.get(name, "")) for template in templates)
    )


def _leader_worker_template(
    service: Service, models: Sequence[OpenModel], image: str, active_flavor: str | None, options: PodOptions
) -> dict[str, Any]:
    main = require_models(models)
    flavors = claimed_flavors(service)
    if active_flavor is None:
        order = flavor_order(main, flavors)
        active_flavor = order[0] if order else None
    flavor = find_flavor(main, active_flavor)
    skip = skip_model_loader(service.metadata.annotations)
    leader, worker = _templates(service)
    left_out = _left_out(service, main, skip, (leader, worker))
    for template in (leader, worker):
        if template is not None:
            inject_models(template, models, skip, image, left_out, options)
            inject_labels(template, main, flavors)
            inject_flavor(template, flavor)
            harden(template, options, c.MODEL_RUNNER_CONTAINER_NAME)
    workload = service.spec.workload_template
    size = workload.get("size")
    return {
        "leaderTemplate": leader,
        "workerTemplate": worker,
        "size": 1 if size is None else size,
        "restartPolicy": workload.get("restartPolicy"),
        "subGroupPolicy": json_copy(workload.get("subGroupPolicy")),
    }


def build_leader_worker_set(
    service: Service,
    models: Sequence[OpenModel],
    init_container_image: str,
    active_flavor: str | None = None,
    pod_options: PodOptions | None = None,
) -> dict[str, Any]:
    """The desired LeaderWorkerSet running `service`'s templates with its models injected.

    The pods are rendered for `active_flavor` (a flavor name of the main model; by default the first of
    `flavors.flavor_order`): its limits as resources, its nodeSelector as required node affinity. They are confined
    as `pod_options` say (`security`; by default `model-pod-security: restricted`, no loader resources, no size
    limit).

    Raises `NoModelClaimedError` or `InvalidModelSourceError`.
    """
    lws = {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _owned(service, service.metadata.name or ""),
        "spec": {
            "replicas": 1 if service.spec.replicas is None else service.spec.replicas,
            "leaderWorkerTemplate": _leader_worker_template(
                service, models, init_container_image, active_flavor, pod_options or PodOptions()
            ),
            "rolloutStrategy": _rollout_strategy(service.spec.rollout_strategy),
            "startupPolicy": LEADER_CREATED if is_multi_host(service) else LEADER_READY,
        },
    }
    result: dict[str, Any] = apply_ready(lws)
    return result


def engine_selector(name: str) -> dict[str, str]:
    """The labels of the pods that serve the inference Service (or Playground) `name`: its groups' leaders, the
    pods the `-lb` Service and an InferencePool send requests to."""
    return {c.LWS_NAME_LABEL: name, c.LWS_WORKER_INDEX_LABEL: "0"}


def build_lb_service(service: Service, models: Sequence[OpenModel]) -> dict[str, Any]:
    """The ClusterIP Service sending port 8080 to the group leaders (worker index 0) of the LeaderWorkerSet."""
    main = require_models(models)
    name = service.metadata.name or ""
    annotations = {c.ACTIVATOR_MODEL_NAME_ANNOTATION: main.metadata.name or ""}
    port = {"name": c.HTTP_PORT_NAME, "protocol": "TCP", "port": c.DEFAULT_BACKEND_PORT}
    lb = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _owned(service, lb_service_name(name), annotations),
        "spec": {
            "ports": [{**port, "targetPort": c.DEFAULT_BACKEND_PORT}],
            "selector": engine_selector(name),
        },
    }
    result: dict[str, Any] = apply_ready(lb)
    return result


def with_scheduler_name(workload_template: dict[str, Any], scheduler_name: str) -> dict[str, Any]:
    """A copy of a Service's workloadTemplate whose pod templates name `scheduler_name` where they named none.

    llmaz persists this into the Service CR itself (an Update), so the LeaderWorkerSet inherits it; an empty
    `scheduler_name` changes nothing.
    """
    result = json_copy(workload_template)
    if not scheduler_name:
        return result
    for key in ("leaderTemplate", "workerTemplate"):
        template = result.get(key)
        if template is None:
            continue
        spec = template.get("spec")
        if spec is None:
            spec = template["spec"] = {}
        if not spec.get("schedulerName"):
            spec["schedulerName"] = scheduler_name
    return result
