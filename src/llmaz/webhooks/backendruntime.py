"""BackendRuntime admission: no defaults; recommended configs need limits >= requests and unique names."""

from __future__ import annotations

from typing import Final

from llmaz.apis import BackendRuntime
from llmaz.apis.quantity import QuantityError, parse_quantity
from llmaz.apis.validation.field import FieldError, forbidden

# llmaz reports both rules on these paths, whatever the index of the recommended config.
RESOURCES_PATH: Final = "spec.resources"
NAME_PATH: Final = "spec.args.name"


def limit_below_request(key: str) -> str:
    return f"resource limit of {key} is less than resource request"


def duplicated_name(name: str) -> str:
    return f"duplicated name {name}"


def validate_backendruntime(backend: BackendRuntime) -> list[FieldError]:
    configs = backend.spec.recommended_configs or []
    errors: list[FieldError] = []
    for config in configs:
        resources = config.resources
        if resources is None:
            continue
        requests = resources.requests or {}
        for key, limit in (resources.limits or {}).items():
            if key in requests and _less(limit, requests[key]):
                errors.append(forbidden(RESOURCES_PATH, limit_below_request(key)))
    seen: set[str] = set()
    for config in configs:
        if config.name in seen:
            errors.append(forbidden(NAME_PATH, duplicated_name(config.name)))
        seen.add(config.name)
    return errors


def _less(limit: int | str, request: int | str) -> bool:
    """limit < request; quantities the schema would reject are left for the schema to report."""
    try:
        return parse_quantity(limit) < parse_quantity(request)
    except QuantityError:
        return False
