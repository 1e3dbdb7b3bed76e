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


@dataclass(frozen=True, slots=True)
class StaticLookup:
    """A lookup over fixed data: backend name -> its recommended config names, and a set of model names."""

    backends: Mapping[str, Collection[str]] = field(default_factory=dict)
    models: Collection[str] = ()

    def open_model_exists(self, name: str) -> bool | None:
        return name in self.models

    def backend_config_names(self, name: str) -> Collection[str] | None:
        return self.backends.get(name)

    def backend_runtime_exists(self, name: str) -> bool | None:
        return name in self.backends


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
