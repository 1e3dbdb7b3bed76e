"""Service admission: no defaults; the validation rules (`llmaz.apis.validation`, shared with the reconciler),
the network policy annotation only admission checks, and warnings naming missing models and claimed flavors the
main model lacks."""

from __future__ import annotations

from typing import Any

from llmaz.apis import Service
from llmaz.apis import constants as c
from llmaz.apis.networkpolicy import NETWORK_POLICY_RULE, parse_network_policy
from llmaz.apis.serving import is_main
from llmaz.apis.validation.field import FieldError, invalid
from llmaz.webhooks.lookup import ReferenceLookup, flavor_warnings, model_warnings


def service_warnings(service: Service, lookup: ReferenceLookup | None) -> list[str]:
    claims = service.spec.model_claims
    models = (claims.models if claims else None) or []
    main = next((m.name for m in models if is_main(m.role)), None)
    flavors = claims.inference_flavors if claims else None
    return model_warnings(lookup, [m.name for m in models]) + flavor_warnings(lookup, main, flavors)


def validate_service_annotations(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """`llmaz.io/network-policy`, when set, must be "gateway-only" or "none" (`llmaz.apis.networkpolicy`).

    Admission only: the Service controller reads a bad value stored without admission as no policy. On UPDATE
    (`old` given) only a changed value is checked, as for the Playground's annotations."""
    meta = obj.get("metadata")
    annotations = (meta.get("annotations") if isinstance(meta, dict) else None) or {}
    old_meta = (old or {}).get("metadata")
    old_annotations = (old_meta.get("annotations") if isinstance(old_meta, dict) else None) or {}
    key = c.NETWORK_POLICY_ANNOTATION
    value = annotations.get(key) if isinstance(annotations, dict) else None
    if value is None or (old is not None and isinstance(old_annotations, dict) and old_annotations.get(key) == value):
        return []
    try:
        parse_network_policy(str(value))
    except ValueError:
        return [invalid(f"metadata.annotations[{key}]", value, NETWORK_POLICY_RULE)]
    return []
