"""Playground -> desired inference Service CR (same name) and optional HorizontalPodAutoscaler.

Invariants:
- Inputs are typed and read-only; `models` is main-first (see `models.main_first`).
- Outputs are apply-ready dicts: apiVersion, kind, metadata with the Playground as controller owner, no `None`, no
  `creationTimestamp`, and a deterministic key and list order (same inputs -> identical JSON).
- The pod template is single-host and carries exactly one container, `model-runner`; llmaz's observable shape is
  kept (terminationGracePeriodSeconds 130, port http/8080/TCP, the dshm volume first, `{type: RollingUpdate}`).
- The effective configName (explicit wins, else detected) selects args, resources, shared memory AND the HPA's
  recommended scale trigger (llmaz's HPA followed the detected name even when another was given); an unknown name
  is a `RecommendedConfigNotFoundError`, surfaced as a condition rather than a bare reconcile error.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from llmaz.apis import BackendRuntime, OpenModel, Playground, RecommendedConfig
from llmaz.apis import constants as c
from llmaz.controllers.builders.adapters import adapter_flags
from llmaz.controllers.builders.errors import RecommendedConfigNotFoundError
from llmaz.controllers.builders.merge import json_copy, merge_envs, merge_resources, quantity_text
from llmaz.controllers.builders.meta import apply_ready, owned_metadata
from llmaz.controllers.builders.models import (
    backend_name,
    effective_config_name,
    recommended_config,
    skip_model_loader,
    template_values,
)
from llmaz.controllers.builders.render import render_args

HPA_API_VERSION = "autoscaling/v2"
# The Playground's annotations its inference Service carries too: the Service controller acts on them.
_COPIED_ANNOTATIONS = (c.SKIP_MODEL_LOADER_ANNOTATION, c.NETWORK_POLICY_ANNOTATION)


def _owned(playground: Playground, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return owned_metadata(name, playground.metadata, c.INFERENCE_API_VERSION, Playground.KIND, annotations)


def _model_claims(playground: Playground) -> dict[str, Any]:
    spec = playground.spec
    if spec.model_claim is not None:
        models = [{"name": spec.model_claim.model_name or "", "role": c.MAIN_ROLE}]
        flavors = spec.model_claim.inference_flavors
    else:
        claimed = spec.model_claims
        refs = (claimed.models if claimed is not None else None) or []
        models = [{"name": ref.name, "role": ref.role or c.MAIN_ROLE} for ref in refs]
        flavors = claimed.inference_flavors if claimed is not None else None
    claims: dict[str, Any] = {"models": models}
    if flavors:
        claims["inferenceFlavors"] = list(flavors)
    return claims


def _selected_config(playground: Playground, backend: BackendRuntime) -> RecommendedConfig:
    name = effective_config_name(playground)
    config = recommended_config(backend, name)
    if config is None:
        raise RecommendedConfigNotFoundError(backend_name(playground), name)
    return config


def _runner_container(
    playground: Playground,
    models: Sequence[OpenModel],
    backend: BackendRuntime,
    config: RecommendedConfig,
    left_out: Collection[str],
) -> dict[str, Any]:
    overrides = playground.spec.backend_runtime_config
    skip = skip_model_loader(playground.metadata.annotations)
    values = template_values(models, skip)
    adapters = adapter_flags(backend_name(playground), models[0], skip, left_out)
    args = render_args(config.args, values) + adapters + list((overrides.args if overrides else None) or ())
    env = merge_envs(backend.spec.envs, overrides.envs if overrides else None)
    version = (overrides.version if overrides else None) or backend.spec.version
    return {
        "name": c.MODEL_RUNNER_CONTAINER_NAME,
        "image": f"{backend.spec.image}:{version}",
        "command": list(backend.spec.command) if backend.spec.command else None,
        "args": args or None,
        "env": env or None,
        "resources": merge_resources(config.resources, overrides.resources if overrides else None) or None,
        "lifecycle": json_copy(backend.spec.lifecycle),
        "ports": [{"name": c.HTTP_PORT_NAME, "containerPort": c.DEFAULT_BACKEND_PORT, "protocol": "TCP"}],
        "startupProbe": json_copy(backend.spec.startup_probe),
        "livenessProbe": json_copy(backend.spec.liveness_probe),
        "readinessProbe": json_copy(backend.spec.readiness_probe),
        # The engine's last log lines say which adapter it could not apply (diagnosis.unusable_adapters).
        "terminationMessagePolicy": "FallbackToLogsOnError" if models[0].spec.adapters else None,
    }


def _pod_spec(container: dict[str, Any], shared_memory_size: int | str | None, scheduler_name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": c.TERMINATION_GRACE_PERIOD_SECONDS}
    if shared_memory_size is not None:
        size = quantity_text(shared_memory_size)
        spec["volumes"] = [{"name": c.SHM_VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": size}}]
        container["volumeMounts"] = [{"name": c.SHM_VOLUME_NAME, "mountPath": c.SHM_MOUNT_PATH}]
    spec["containers"] = [container]
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return spec


def build_service(
    playground: Playground,
    models: Sequence[OpenModel],
    backend: BackendRuntime,
    scheduler_name: str = "",
    left_out: Collection[str] = frozenset(),
) -> dict[str, Any]:
    """The desired `inference.llmaz.io/v1alpha1` Service for `playground`, served by `backend`.

    `scheduler_name` (see `service_scheduler_name`) goes into the pod template, so the Service is created with the
    name the Service controller would otherwise persist into it with a write of its own.

    The main model's adapters are loaded with the flags of `adapters.ADAPTER_FLAGS`, after the config's arguments,
    but for those named in `left_out` (`adapters.left_out_adapters`: they failed for good).

    Raises `RecommendedConfigNotFoundError`, `ArgRenderError`, `InvalidModelSourceError`, `NoModelClaimedError` or
    `AdaptersUnsupportedError`.
    """
    config = _selected_config(playground, backend)
    overrides = playground.spec.backend_runtime_config
    shm = (overrides.shared_memory_size if overrides else None) or config.shared_memory_size
    container = _runner_container(playground, models, backend, config, left_out)
    annotations = playground.metadata.annotations or {}
    copied = {key: annotations[key] for key in _COPIED_ANNOTATIONS if key in annotations}
    service = {
        "apiVersion": c.INFERENCE_API_VERSION,
        "kind": "Service",
        "metadata": _owned(playground, playground.metadata.name or "", copied or None),
        "spec": {
            "modelClaims": _model_claims(playground),
            "replicas": 1 if playground.spec.replicas is None else playground.spec.replicas,
            "workloadTemplate": {"workerTemplate": {"spec": _pod_spec(container, shm, scheduler_name)}},
            "rolloutStrategy": {"type": "RollingUpdate"},
        },
    }
    result: dict[str, Any] = apply_ready(service)
    return result


def service_scheduler_name(live_service: dict[str, Any] | None, configured: str) -> str:
    """The scheduler name for a Playground's Service: the one it already carries, else the configured one.

    llmaz persists the global `scheduler-name` into a Service once, where its pod templates name none, and never
    changes it afterwards; carrying the live value forward keeps that, so a changed global config rolls no pods.
    """
    template = ((live_service or {}).get("spec") or {}).get("workloadTemplate") or {}
    live = ((template.get("workerTemplate") or {}).get("spec") or {}).get("schedulerName")
    return live if isinstance(live, str) and live else configured


def _hpa_trigger(playground: Playground, backend: BackendRuntime) -> dict[str, Any] | None:
    elastic = playground.spec.elastic_config
    if elastic is not None and elastic.scale_trigger is not None and elastic.scale_trigger.hpa is not None:
        return elastic.scale_trigger.hpa.to_dict()
    if elastic is not None and elastic.scale_trigger is not None and elastic.scale_trigger.requests is not None:
        return None  # llmaz-gateway's autoscaler scales it; the recommended config's HPA would fight it
    name = effective_config_name(playground)
    for config in backend.spec.recommended_configs or ():
        if config.name == name and config.scale_trigger is not None and config.scale_trigger.hpa is not None:
            return config.scale_trigger.hpa.to_dict()
    return None


def build_hpa(playground: Playground, backend: BackendRuntime) -> dict[str, Any] | None:
    """The desired HPA scaling the Playground, or None when it has no elasticConfig or no scale trigger applies.

    The trigger is the Playground's own `elasticConfig.scaleTrigger.hpa`, else that of the recommended config with
    the effective configName; a Playground whose trigger is `requests` (llmaz-gateway's autoscaler) has none.
    None means "no HPA should exist": the caller removes a previously applied one.
    """
    elastic = playground.spec.elastic_config
    if elastic is None:
        return None
    trigger = _hpa_trigger(playground, backend)
    if trigger is None:
        return None
    name = playground.metadata.name or ""
    hpa = {
        "apiVersion": HPA_API_VERSION,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _owned(playground, name),
        "spec": {
            "scaleTargetRef": {"apiVersion": c.INFERENCE_API_VERSION, "kind": Playground.KIND, "name": name},
            "minReplicas": 1 if elastic.min_replicas is None else elastic.min_replicas,
            "maxReplicas": elastic.max_replicas,
            "metrics": trigger.get("metrics"),
            "behavior": trigger.get("behavior"),
        },
    }
    result: dict[str, Any] = apply_ready(hpa)
    return result
