"""Playground validation: the claim, resource and elastic rules, with llmaz's texts.

Deliberate differences from llmaz (docs/compatibility.md):
- The main-model rule counts models by role (unset or `main`), not by name, and also requires one main model
  (llmaz counted models *named* `main`, so the rule never fired).
- A `requests` scale trigger (llmaz-gateway's autoscaler, which llmaz lacks) satisfies the "hpa couldn't be nil"
  rule as `hpa` does, and is checked by `llmaz.apis.validation.autoscale`.
- Names are DNS-1035 labels of at most 52 characters, so that every name made from them fits
  (`llmaz.apis.serving.max_name_length`); llmaz admitted longer ones, which its LeaderWorkerSet could not run.
- Elastic errors are reported on the fields they concern: `spec.elasticConfig.minReplicas` (llmaz:
  `spec.elasticConfig.scaleTrigger.hpa`) and `spec.elasticConfig.scaleTrigger.hpa` (llmaz:
  `spec.backendRuntime.scaleTrigger.hpa`). The detail texts are llmaz's.
"""

from __future__ import annotations

from typing import Final

from llmaz.apis import constants as c
from llmaz.apis.base import ResourceRequirements
from llmaz.apis.core_v1alpha1 import ModelClaims
from llmaz.apis.inference_v1alpha1 import Playground
from llmaz.apis.quantity import QuantityError, canonical_quantity, parse_quantity
from llmaz.apis.serving import is_main, max_name_length
from llmaz.apis.validation.autoscale import policy_errors
from llmaz.apis.validation.field import FieldError, forbidden, invalid
from llmaz.apis.validation.names import validate_serving_name

CLAIMS_BOTH_NIL: Final = "modelClaim and modelClaims couldn't be both nil"
CLAIMS_BOTH_SET: Final = "modelClaim and modelClaims couldn't be both not nil"
SPECULATIVE_NEEDS_TWO: Final = "only two models are allowed in speculativeDecoding mode"
ONE_MAIN_ONLY: Final = "only one main model is allowed"
MAIN_REQUIRED: Final = "main model is required"
MIN_REPLICAS_ZERO: Final = "minReplicas couldn't be 0"
MIN_BELOW_MAX: Final = "minReplicas must be less than maxReplicas"
HPA_NIL: Final = "hpa couldn't be nil"

MODELS_PATH: Final = "spec.modelClaims.models"
RESOURCES_PATH: Final = "spec.backendRuntimeConfig.resources"
MIN_REPLICAS_PATH: Final = "spec.elasticConfig.minReplicas"
HPA_PATH: Final = "spec.elasticConfig.scaleTrigger.hpa"


def limit_below_request(key: str, limit: int | str, request: int | str) -> str:
    return (
        f"limit ({canonical_quantity(limit)}) for {key} must be greater than or equal to "
        f"request ({canonical_quantity(request)})"
    )


def is_speculative(playground: Playground) -> bool:
    """The recommended-config mode: speculative decoding when only modelClaims is set and a draft is claimed."""
    claims = playground.spec.model_claims
    if playground.spec.model_claim is not None or claims is None:
        return False
    return any(m.role == c.DRAFT_ROLE for m in claims.models or [])


def validate_playground(playground: Playground, creating: bool) -> list[FieldError]:
    spec = playground.spec
    errors: list[FieldError] = []
    if spec.model_claim is None and spec.model_claims is None:
        errors.append(forbidden("spec", CLAIMS_BOTH_NIL))
    if spec.model_claim is not None and spec.model_claims is not None:
        errors.append(forbidden("spec", CLAIMS_BOTH_SET))
    if spec.model_claims is not None:
        errors += _validate_claims(spec.model_claims, is_speculative(playground))
    runtime = spec.backend_runtime_config
    if runtime is not None and runtime.resources is not None:
        errors += _validate_resources(runtime.resources)
    errors += _validate_elastic(playground)
    if creating:
        errors += validate_serving_name(playground.metadata.to_dict(), max_name_length())
    return errors


def _validate_claims(claims: ModelClaims, speculative: bool) -> list[FieldError]:
    models = claims.models or []
    errors = []
    if speculative and len(models) != 2:
        errors.append(forbidden(MODELS_PATH, SPECULATIVE_NEEDS_TWO))
    mains = sum(1 for m in models if is_main(m.role))
    if mains > 1:
        errors.append(forbidden(MODELS_PATH, ONE_MAIN_ONLY))
    elif mains == 0:
        errors.append(forbidden(MODELS_PATH, MAIN_REQUIRED))
    return errors


def _validate_resources(resources: ResourceRequirements) -> list[FieldError]:
    requests = resources.requests or {}
    errors = []
    for key, limit in (resources.limits or {}).items():
        if key not in requests:
            continue
        try:
            below = parse_quantity(limit) < parse_quantity(requests[key])
        except QuantityError:
            continue  # the schema reports malformed quantities
        if below:
            errors.append(forbidden(RESOURCES_PATH, limit_below_request(key, limit, requests[key])))
    return errors


def _validate_elastic(playground: Playground) -> list[FieldError]:
    elastic = playground.spec.elastic_config
    if elastic is None:
        return []
    errors = []
    if elastic.min_replicas is not None:
        if elastic.min_replicas == 0:
            errors.append(forbidden(MIN_REPLICAS_PATH, MIN_REPLICAS_ZERO))
        if elastic.min_replicas >= elastic.max_replicas:
            errors.append(invalid(MIN_REPLICAS_PATH, elastic.min_replicas, MIN_BELOW_MAX))
    trigger = elastic.scale_trigger
    if trigger is not None and trigger.hpa is None and trigger.requests is None:
        errors.append(forbidden(HPA_PATH, HPA_NIL))
    return errors + policy_errors(elastic.to_dict())
