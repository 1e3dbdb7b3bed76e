"""What the webhooks ask about other objects, to warn (never to deny) when a reference does not exist yet.

The manager answers from its informer caches; tests use `StaticLookup`. Every answer may be None, meaning
"cannot tell right now" (a cache not yet synced): no warning is given then, so a warning is never wrong.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol


class ReferenceLookup(Protocol):
    def open_model_exists(self, name: str) -> bool | None:
        """Whether the cluster-scoped OpenModel `name` exists; None when unknown."""
        ...

    def backend_config_names(self, name: str) -> Collection[str] | None:
        """The recommendedConfigs names of BackendRuntime `name`; None when it is missing or unknown."""
        ...

    def backend_runtime_exists(self, name: str) -> bool | None:
        """Whether the cluster-scoped BackendRuntime `name` exists; None when unknown."""
        ...

    def open_model_flavors(self, name: str) -> Collection[str] | None:
        """The inference flavor names of OpenModel `name`; None when it is missing or unknown."""
        ...


@dataclass(frozen=True, slots=True)
class StaticLookup:
    """A lookup over fixed data: backend name -> its recommended config names, and a set of model names."""

    backends: Mapping[str, Collection[str]] = field(default_factory=dict)
    models: Collection[str] = ()
    flavors: Mapping[str, Collection[str]] = field(default_factory=dict)

    def open_model_exists(self, name: str) -> bool | None:
        return name in self.models

    def backend_config_names(self, name: str) -> Collection[str] | None:
        return self.backends.get(name)

    def backend_runtime_exists(self, name: str) -> bool | None:
        return name in self.backends

    def open_model_flavors(self, name: str) -> Collection[str] | None:
        return self.flavors.get(name, () if name in self.models else None)


def missing_model_warning(name: str) -> str:
    return f"OpenModel {name!r} not found; the workload waits until it exists"


def missing_backend_warning(name: str) -> str:
    return f"BackendRuntime {name!r} not found; the Playground waits until it exists"


def missing_config_warning(backend: str, config: str) -> str:
    return f"BackendRuntime {backend!r} has no recommended config {config!r}"


def model_warnings(lookup: ReferenceLookup | None, names: list[str]) -> list[str]:
    if lookup is None:
        return []
    return [missing_model_warning(n) for n in dict.fromkeys(names) if lookup.open_model_exists(n) is False]


def missing_flavor_warning(model: str, flavor: str) -> str:
    return (
        f"OpenModel {model!r} has no inference flavor {flavor!r}; it is skipped (the Service's FlavorsResolved "
        "condition says which flavor is used)"
    )


def flavor_warnings(lookup: ReferenceLookup | None, main_model: str | None, claimed: list[str] | None) -> list[str]:
    """A claimed inference flavor the main model does not define (skipped at reconcile)."""
    if lookup is None or not main_model or not claimed:
        return []
    defined = lookup.open_model_flavors(main_model)
    if defined is None:
        return []
    return [missing_flavor_warning(main_model, f) for f in dict.fromkeys(claimed) if f not in defined]
