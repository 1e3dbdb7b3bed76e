"""Service admission: no defaults; model claim rules, the model-runner container on create, warnings.

Deliberate difference from llmaz (docs/compatibility.md): a Service must claim at least one model and exactly
one main model. llmaz admitted a Service without models, which its controller then failed on.
"""

from __future__ import annotations

from typing import Any, Final

from llmaz.apis import Service
from llmaz.apis import constants as c
from llmaz.webhooks.field import FieldError, forbidden, required
from llmaz.webhooks.lookup import ReferenceLookup, model_warnings
from llmaz.webhooks.names import validate_name

SPECULATIVE_NEEDS_TWO: Final = "only two models are allowed in speculativeDecoding mode"
MAIN_REQUIRED: Final = "main model is required"
ONE_MAIN_ONLY: Final = "only one main model is allowed"
MODEL_REQUIRED: Final = "at least one model is required"
RUNNER_MISSING: Final = "model-runner container doesn't exist"

MODELS_PATH: Final = "spec.modelClaims.models"
CONTAINERS_PATH: Final = "spec.workloadTemplate.workerTemplate.spec.containers"


def validate_service(service: Service, creating: bool) -> list[FieldError]:
    claims = service.spec.model_claims
    models = (claims.models if claims else None) or []
    speculative = any(m.role == c.DRAFT_ROLE for m in models)
    mains = sum(1 for m in models if m.role in (None, c.MAIN_ROLE))
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
    if creating:
        errors += validate_name(service.metadata.to_dict())
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


def service_warnings(service: Service, lookup: ReferenceLookup | None) -> list[str]:
    claims = service.spec.model_claims
    return model_warnings(lookup, [m.name for m in (claims.models if claims else None) or []])
