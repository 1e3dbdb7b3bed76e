"""A fluent builder that wires watches, predicates and options into a `Controller`.

    controller = (
        ControllerBuilder("playground")
        .for_(PLAYGROUND, predicates=[generation_changed()])
        .owns(SERVICE)
        .watches(MODEL, playgrounds_using_model)
        .with_options(max_concurrent_reconciles=4)
        .build(PlaygroundReconciler(client), informers)
    )
    manager.add(controller)

- `for_(resource)`: reconcile objects of `resource`; each event enqueues the object's own key.
- `owns(resource)`: objects of `resource` whose controller ownerReference points at a `for_` object enqueue
  that owner.
- `watches(resource, mapper)`: events for `resource` enqueue whatever `mapper(obj)` returns.

`build` asks `informer_source` for one (shared) informer per watched resource straight away, so the source
knows every informer before it starts; the controller adds its event handlers when it runs. Building does
not start anything: hand the controller to the manager.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, Self

from llmaz.runtime.cache.interfaces import Informer
from llmaz.runtime.clock import Clock
from llmaz.runtime.controller.controller import Controller, ControllerOptions, Watch
from llmaz.runtime.controller.handler import ObjectMapper, enqueue_for_object, enqueue_for_owner
from llmaz.runtime.controller.predicate import Predicate
from llmaz.runtime.controller.reconcile import Reconciler
from llmaz.runtime.resource import Resource
from llmaz.runtime.workqueue import RateLimiter


class InformerSource(Protocol):
    """Anything that hands out the shared informer for a resource (the manager's informer factory)."""

    def informer_for(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer: ...


@dataclass(frozen=True, slots=True)
class Scope:
    """Narrows a `watches` informer to a namespace and/or selectors (default: every object of the resource)."""

    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


class ControllerBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._for: tuple[Resource, tuple[Predicate, ...]] | None = None
        self._owns: list[tuple[Resource, tuple[Predicate, ...]]] = []
        self._watches: list[tuple[Resource, ObjectMapper, tuple[Predicate, ...], Scope]] = []
        self._options = ControllerOptions()

    def for_(self, resource: Resource, *, predicates: Sequence[Predicate] = ()) -> Self:
        """Reconcile objects of `resource`. Call once."""
        if self._for is not None:
            raise ValueError(f"controller {self._name!r}: for_() was already called with {self._for[0]}")
        self._for = (resource, tuple(predicates))
        return self

    def owns(self, resource: Resource, *, predicates: Sequence[Predicate] = ()) -> Self:
        """Reconcile the `for_` object that is the controller owner of a changed `resource` object."""
        self._owns.append((resource, tuple(predicates)))
        return self

    def watches(
        self,
        resource: Resource,
        mapper: ObjectMapper,
        *,
        predicates: Sequence[Predicate] = (),
        scope: Scope | None = None,
    ) -> Self:
        """Reconcile the keys `mapper` returns for a changed `resource` object (within `scope`, if given)."""
        self._watches.append((resource, mapper, tuple(predicates), scope or Scope()))
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int | None = None,
        cache_sync_timeout: float | None = None,
        reconcile_timeout: float | None = None,
        needs_leader_election: bool | None = None,
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
    ) -> Self:
        """Override `ControllerOptions` defaults; arguments left as None keep the current value (so a
        `reconcile_timeout` of 0, not None, turns the timeout off)."""
        changes: dict[str, Any] = {
            "max_concurrent_reconciles": max_concurrent_reconciles,
            "cache_sync_timeout": cache_sync_timeout,
            "reconcile_timeout": reconcile_timeout,
            "needs_leader_election": needs_leader_election,
            "rate_limiter": rate_limiter,
            "clock": clock,
        }
        self._options = replace(self._options, **{k: v for k, v in changes.items() if v is not None})
        return self

    def build(self, reconciler: Reconciler, informer_source: InformerSource) -> Controller:
        if self._for is None and self._owns:
            raise ValueError(f"controller {self._name!r}: owns() needs for_() to name the owner")
        if self._for is None and not self._watches:
            raise ValueError(f"controller {self._name!r}: call for_() or watches() to say what to reconcile")
        watches: list[Watch] = []
        options = self._options
        if self._for is not None:
            primary, predicates = self._for
            options = replace(options, kind=primary.kind)
            watches.append(self._watch(informer_source, primary, enqueue_for_object(), predicates))
            for owned, owned_predicates in self._owns:
                watches.append(self._watch(informer_source, owned, enqueue_for_owner(primary), owned_predicates))
        for resource, mapper, mapped_predicates, scope in self._watches:
            watches.append(self._watch(informer_source, resource, mapper, mapped_predicates, scope))
        return Controller(self._name, reconciler, watches, options)

    @staticmethod
    def _watch(
        source: InformerSource,
        resource: Resource,
        mapper: ObjectMapper,
        predicates: tuple[Predicate, ...],
        scope: Scope | None = None,
    ) -> Watch:
        scope = scope or Scope()
        informer = source.informer_for(resource, scope.namespace, scope.label_selector, scope.field_selector)
        return Watch(informer, mapper, predicates, source=str(resource))
