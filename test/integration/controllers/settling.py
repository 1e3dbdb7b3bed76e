"""Positive signals that the manager has done all it will do about the objects as they are now, so a test can then
assert that something did NOT happen (no new Event, no write).

`settled` waits until the manager's caches hold every given object at the resourceVersion the API server has, and
its controllers have no key queued or being reconciled, with no reconcile finishing while that was checked.
`events_flushed` waits until every Event the manager recorded so far has been written: a marker Event, recorded
after them through the same broadcaster (which writes in order), has reached the API server.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS, NORMAL
from llmaz.runtime.manager import Manager
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.waiting import eventually

CONTROLLERS = ("playground", "service", "openmodel", "backendruntime")


def _metric(metric: str, /, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def _idle() -> bool:
    """No key queued and no reconcile running, in any llmaz controller (their queue and worker metrics)."""
    return all(
        _metric("workqueue_depth", name=c, controller=c, priority="") == 0
        and _metric("controller_runtime_active_workers", controller=c) == 0
        for c in CONTROLLERS
    )


def reconciles(*controllers: str) -> float:
    """Reconciles finished so far by `controllers` (default: all four), whatever their result."""
    return sum(
        _metric("controller_runtime_reconcile_total", controller=c, result=result)
        for c in controllers or CONTROLLERS
        for result in ("success", "error", "requeue", "requeue_after")
    )


def _cached_version(manager: Manager, resource: Resource, key: str) -> str | None:
    for informer in manager.informers.informers:
        if informer.name == str(resource) or informer.name.startswith(f"{resource}/"):
            cached = informer.store.get(key)
            if cached is not None:
                return str(cached["metadata"]["resourceVersion"])
    return None


async def settled(manager: Manager, client: Client, namespace: str, objects: Sequence[tuple[Resource, str]]) -> None:
    """Wait until the manager has caught up with `objects` (resource, name; in `namespace` where namespaced) and is
    idle."""

    async def caught_up_and_idle() -> bool:
        before = reconciles()
        if not _idle():
            return False
        for resource, name in objects:
            scope = namespace if resource.namespaced else None
            current = (await client.get(resource, name, scope))["metadata"]["resourceVersion"]
            cached = _cached_version(manager, resource, f"{scope}/{name}" if scope else name)
            assert cached == current, f"{resource} {name}: cached {cached}, current {current}"
        return _idle() and reconciles() == before

    names = ", ".join(f"{resource.kind} {name}" for resource, name in objects)
    await eventually(caught_up_and_idle, within=30, what=f"the manager to catch up with {names} and go idle")


async def events_flushed(manager: Manager, client: Client, namespace: str) -> None:
    """Wait until the Events the manager recorded before this call have been written."""
    token = secrets.token_hex(6)
    marker = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "events-marker", "namespace": namespace}}
    manager.event_recorder("events-marker").event(marker, NORMAL, "Marker", token)

    async def marker_written() -> bool:
        return any(event.get("note") == token for event in (await client.list(EVENTS, namespace)).items)

    await eventually(marker_written, within=30, what="the marker Event, recorded after the manager's own")
