"""Playground admission: the model-name label default, the validation rules (`llmaz.apis.validation`, shared
with the reconciler), the annotations only admission checks, and reference warnings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmaz.apis import Playground
from llmaz.apis import constants as c
from llmaz.apis.networkpolicy import NETWORK_POLICY_RULE, parse_network_policy
from llmaz.apis.pools import FAILURE_MODE_RULE, POOL_RULE, parse_failure_mode, parse_pool_opt_in
from llmaz.apis.routing import STRATEGY_RULE, WEIGHTS_RULE, parse_strategy, parse_weights
from llmaz.apis.scaletozero import IDLE_TIME_RULE, parse_idle_time
from llmaz.apis.serving import is_main
from llmaz.apis.validation.field import FieldError, invalid
from llmaz.apis.validation.playground import is_speculative
from llmaz.webhooks.lookup import (
    ReferenceLookup,
    flavor_warnings,
    missing_backend_warning,
    missing_config_warning,
    model_warnings,
)


def default_playground(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` whose `llmaz.io/model-name` label is the main model's name ("" if none), always set.

    Only `metadata` and its labels are copied; the rest is shared with `obj`, which is left unchanged.
    """
    out = dict(obj)
    spec = out.get("spec")
    meta = out.get("metadata")
    meta = out["metadata"] = dict(meta) if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    labels = meta["labels"] = dict(labels) if isinstance(labels, dict) else {}
    labels[c.MODEL_NAME_LABEL] = _main_model_name(spec if isinstance(spec, dict) else {})
    return out


def _main_model_name(spec: dict[str, Any]) -> str:
    """modelClaim.modelName, else the LAST modelClaims model whose role is unset or main, else ""."""
    claim, claims = spec.get("modelClaim"), spec.get("modelClaims")
    if isinstance(claim, dict):
        name = claim.get("modelName")
        return name if isinstance(name, str) else ""
    found = ""
    models = claims.get("models") if isinstance(claims, dict) else None
    for model in models if isinstance(models, list) else []:
        if isinstance(model, dict) and is_main(model.get("role")):
            name = model.get("name")
            found = name if isinstance(name, str) else ""
    return found


# Annotations only admission checks: each with its parser (ValueError when refused) and the rule a denial states.
_CHECKED_ANNOTATIONS: tuple[tuple[str, Callable[[str], object], str], ...] = (
    (c.SCALE_TO_ZERO_AFTER_ANNOTATION, parse_idle_time, IDLE_TIME_RULE),
    (c.ROUTING_STRATEGY_ANNOTATION, parse_strategy, STRATEGY_RULE),
    (c.ROUTING_WEIGHTS_ANNOTATION, parse_weights, WEIGHTS_RULE),
    (c.INFERENCE_POOL_ANNOTATION, parse_pool_opt_in, POOL_RULE),
    (c.INFERENCE_POOL_FAILURE_MODE_ANNOTATION, parse_failure_mode, FAILURE_MODE_RULE),
    (c.NETWORK_POLICY_ANNOTATION, parse_network_policy, NETWORK_POLICY_RULE),
)


def _annotations(obj: dict[str, Any] | None) -> dict[str, Any]:
    meta = (obj or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def validate_playground_annotations(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """The gateway's annotations, when set, must be what it accepts: `llmaz.io/scale-to-zero-after` an idle time
    (`llmaz.apis.scaletozero`), `llmaz.io/routing-strategy` and `llmaz.io/routing-weights` a strategy and weights
    (`llmaz.apis.routing`); and the InferencePool's, `llmaz.io/inference-pool` "true" or "false" and
    `llmaz.io/inference-pool-failure-mode` FailOpen or FailClose (`llmaz.apis.pools`); and
    `llmaz.io/network-policy` "gateway-only" or "none" (`llmaz.apis.networkpolicy`).

    Admission only: the gateway ignores a bad value it finds stored (scale to zero off, its own routing), and the
    Playground controller reads a bad pool annotation the safe way (no pool; FailClose). On UPDATE (`old` given)
    only a changed value is checked, so a Playground stored with a bad value before this check can still be
    updated, and deleted once its finalizers go.
    """
    errors: list[FieldError] = []
    for annotation, parse, rule in _CHECKED_ANNOTATIONS:
        value = _annotations(obj).get(annotation)
        if value is None or (old is not None and _annotations(old).get(annotation) == value):
            continue
        try:
            parse(str(value))
        except ValueError:
            errors.append(invalid(f"metadata.annotations[{annotation}]", value, rule))
    return errors


def playground_warnings(playground: Playground, lookup: ReferenceLookup | None) -> list[str]:
    """Warnings for a claimed OpenModel, the BackendRuntime, or its recommended config not existing yet, and
    for claimed inference flavors the main model lacks."""
    if lookup is None:
        return []
    spec = playground.spec
    names = [spec.model_claim.model_name] if spec.model_claim and spec.model_claim.model_name else []
    names += [m.name for m in (spec.model_claims.models or [])] if spec.model_claims else []
    warnings = model_warnings(lookup, names)
    if spec.model_claim is not None:
        warnings += flavor_warnings(lookup, spec.model_claim.model_name, spec.model_claim.inference_flavors)
    elif spec.model_claims is not None:
        main = next((m.name for m in spec.model_claims.models or [] if is_main(m.role)), None)
        warnings += flavor_warnings(lookup, main, spec.model_claims.inference_flavors)
    runtime = spec.backend_runtime_config
    backend = (runtime.backend_name if runtime else None) or c.DEFAULT_BACKEND_NAME
    configs = lookup.backend_config_names(backend)
    if configs is None:
        if lookup.backend_runtime_exists(backend) is False:
            warnings.append(missing_backend_warning(backend))
        return warnings
    default = c.SPECULATIVE_DECODING_CONFIG_NAME if is_speculative(playground) else c.DEFAULT_CONFIG_NAME
    config = (runtime.config_name if runtime else None) or default
    if config not in configs:
        warnings.append(missing_config_warning(backend, config))
    return warnings
