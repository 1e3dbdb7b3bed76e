"""Service validation: model claim rules, a workload size of at least one, the model-runner container on create.

Deliberate differences from llmaz (docs/compatibility.md): a Service must claim at least one model and exactly
one main model, and its workload size must be at least 1. llmaz admitted a Service without models, which its
controller then failed on, and a size of 0, which the LeaderWorkerSet controller cannot run. Its name must be a
DNS-1035 label short enough for every name made from it (`llmaz.apis.serving.max_name_length`: 52 characters, 48 for
a multi-host Service).
"""

from __future__ import annotations

from typing import Any, Final

from llmaz.apis import constants as c
from llmaz.apis.inference_v1alpha1 import Service
from llmaz.apis.serving import MIN_GROUP_INDEX_DIGITS, is_main, max_name_length
from llmaz.apis.validation.field import FieldError, forbidden, invalid, required
from llmaz.apis.validation.names import validate_serving_name

SPECULATIVE_NEEDS_TWO: Final = "only two models are allowed in speculativeDecoding mode"
MAIN_REQUIRED: Final = "main model is required"
ONE_MAIN_ONLY: Final = "only one main model is allowed"
MODEL_REQUIRED: Final = "at least one model is required"
RUNNER_MISSING: Final = "model-runner container doesn't exist"
SIZE_BELOW_ONE: Final = "must be greater than or equal to 1"

MODELS_PATH: Final = "spec.modelClaims.models"
CONTAINERS_PATH: Final = "spec.workloadTemplate.workerTemplate.spec.containers"
SIZE_PATH: Final = "spec.workloadTemplate.size"


def validate_service(service: Service, creating: bool, reconciling: bool = False) -> list[FieldError]:
    """The Service's field errors; `creating` adds the rules of a create. `reconciling` (the reconciler's run of
    the create rules) sizes a multi-host name for the Service's current replicas alone, so a Service admitted
    before the name limit, whose groups fit, is not stopped."""
    claims = service.spec.model_claims
    models = (claims.models if claims else None) or []
    speculative = any(m.role == c.DRAFT_ROLE for m in models)
    mains = sum(1 for m in models if is_main(m.role))
    errors: list[FieldError] = []
    if not models:
        errors.append(required(MODELS_PATH, MODEL_REQUIRED))
    elif speculative:
        if len(models) != 2:
            errors.append(forbidden(MODELS_PATH, SPECULATIVE_NEEDS_TWO))
        if mains != 1:
            errors.append(forbidden(MODELS_PATH, MAIN_REQUIRED))
    elif mains > 1:
        errors.append(forbidden(MODELS_PATH, ONE_MAIN_ONLY))
    size = service.spec.workload_template.get("size")
    if isinstance(size, int) and not isinstance(size, bool) and size < 1:
        errors.append(invalid(SIZE_PATH, size, SIZE_BELOW_ONE))
    if creating:
        multi_host = service.spec.workload_template.get("leaderTemplate") is not None
        replicas = 1 if service.spec.replicas is None else service.spec.replicas
        limit = max_name_length(multi_host, replicas, 1 if reconciling else MIN_GROUP_INDEX_DIGITS)
        errors += validate_serving_name(service.metadata.to_dict(), limit)
        if not _has_model_runner(service.spec.workload_template):
            errors.append(forbidden(CONTAINERS_PATH, RUNNER_MISSING))
    return errors


def _has_model_runner(template: dict[str, Any]) -> bool:
    worker = template.get("workerTemplate")
    pod_spec = worker.get("spec") if isinstance(worker, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    return any(
        isinstance(container, dict) and container.get("name") == c.MODEL_RUNNER_CONTAINER_NAME
        for container in (containers if isinstance(containers, list) else [])
    )
