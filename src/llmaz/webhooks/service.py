"""Service admission: no defaults; the validation rules (`llmaz.apis.validation`, shared with the reconciler)
and warnings naming missing models and claimed flavors the main model lacks."""

from __future__ import annotations

from llmaz.apis import Service
from llmaz.apis.serving import is_main
from llmaz.webhooks.lookup import ReferenceLookup, flavor_warnings, model_warnings


def service_warnings(service: Service, lookup: ReferenceLookup | None) -> list[str]:
    claims = service.spec.model_claims
    models = (claims.models if claims else None) or []
    main = next((m.name for m in models if is_main(m.role)), None)
    flavors = claims.inference_flavors if claims else None
    return model_warnings(lookup, [m.name for m in models]) + flavor_warnings(lookup, main, flavors)
