"""The manager's answer to the webhooks' `ReferenceLookup`: its informer caches.

Until the caches have synced the answer is None ("cannot tell"), so no warning is given on a cold start.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from llmaz.apis import constants as c
from llmaz.runtime.cache import Store
from llmaz.runtime.rbac import READ, PolicyRule

# The caches it reads are informers of these kinds (shared with the controllers when both run).
RBAC_RULES = (
    PolicyRule(c.CORE_GROUP, ("openmodels",), READ),
    PolicyRule(c.INFERENCE_GROUP, ("backendruntimes",), READ),
)


class CacheLookup:
    def __init__(self, open_models: Store, backend_runtimes: Store, synced: Callable[[], bool]) -> None:
        self._models = open_models
        self._backends = backend_runtimes
        self._synced = synced

    def open_model_exists(self, name: str) -> bool | None:
        return self._models.get(name) is not None if self._synced() else None

    def backend_runtime_exists(self, name: str) -> bool | None:
        return self._backends.get(name) is not None if self._synced() else None

    def backend_config_names(self, name: str) -> Collection[str] | None:
        if not self._synced():
            return None
        backend = self._backends.get(name)
        if backend is None:
            return None
        configs = (backend.get("spec") or {}).get("recommendedConfigs") or []
        return [str(config.get("name")) for config in configs]

    def open_model_flavors(self, name: str) -> Collection[str] | None:
        if not self._synced():
            return None
        model = self._models.get(name)
        if model is None:
            return None
        config = (model.get("spec") or {}).get("inferenceConfig") or {}
        return [str(flavor.get("name")) for flavor in config.get("flavors") or []]
