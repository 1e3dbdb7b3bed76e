"""The InferencePool (Gateway API Inference Extension, `inference.networking.k8s.io/v1`) of a Playground that asks
for one (`llmaz.apis.pools`).

The pool is named like the Playground, in its namespace, controlled by it and labelled as managed by llmaz like
every child. It selects exactly the pods the Playground's `-lb` Service sends requests to (the groups' leaders,
`service.engine_selector`), on the engine port, and names the endpoint picker Service `llmaz-epp` in the same
namespace (the manager keeps it there, mirroring llmaz-gateway's, see `controllers.epp`), with the failure mode
the Playground asks for.
"""

from __future__ import annotations

from typing import Any

from llmaz.apis import Playground
from llmaz.apis import constants as c
from llmaz.apis.pools import failure_mode
from llmaz.controllers.builders.meta import apply_ready, owned_metadata
from llmaz.controllers.builders.service import engine_selector


def build_inference_pool(
    playground: Playground, epp_service: str = c.EPP_SERVICE_NAME, epp_port: int = c.EPP_PORT
) -> dict[str, Any]:
    """The desired InferencePool of `playground` (whether it asks for one is the caller's to check)."""
    name = playground.metadata.name or ""
    pool = {
        "apiVersion": c.GIE_API_VERSION,
        "kind": "InferencePool",
        "metadata": owned_metadata(name, playground.metadata, c.INFERENCE_API_VERSION, Playground.KIND),
        "spec": {
            "selector": {"matchLabels": engine_selector(name)},
            "targetPorts": [{"number": c.DEFAULT_BACKEND_PORT}],
            "endpointPickerRef": {
                "kind": "Service",
                "name": epp_service,
                "port": {"number": epp_port},
                "failureMode": failure_mode(playground.metadata.annotations),
            },
        },
    }
    result: dict[str, Any] = apply_ready(pool)
    return result
