"""Service admission: no defaults; the validation rules (`llmaz.apis.validation`, shared with the reconciler)
and warnings naming missing models."""

from __future__ import annotations

from llmaz.apis import Service
from llmaz.webhooks.lookup import ReferenceLookup, model_warnings


def service_warnings(service: Service, lookup: ReferenceLookup | None) -> list[str]:
    claims = service.spec.model_claims
    return model_warnings(lookup, [m.name for m in (claims.models if claims else None) or []])
