"""An object deleted while its key waited in the queue (or during its reconcile) ends quietly: the NotFound of
its own status write is success, not a "Reconciler error", and nothing is counted as an error. A NotFound about
anything else is still a failure."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.apis import resources as r
from llmaz.controllers.flavors.capacity import NodeCapacity
from llmaz.controllers.playground import PlaygroundReconciler
from llmaz.controllers.readiness import model_reconciler
from llmaz.controllers.service import ServiceReconciler
from llmaz.controllers.settings import SettingsHolder
from llmaz.runtime.client import NotFound
from llmaz.runtime.controller import ControllerBuilder, Reconciler
from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.resource import Resource
from llmaz_dev.testing import FakeClock, FakeInformerSource
from llmaz_dev.testing.runnables import started
from llmaz_dev.testing.waiting import eventually

RECONCILES = "controller_runtime_reconcile_total"
GLOBAL_CONFIG = {"data": {"config.data": "init-container-image: inftyai/model-loader:v0.0.10\n"}}


class DeletedEverywhere:
    """A client for which every write fails with `error`, as for an object deleted since it was cached."""

    def __init__(self, error: NotFound) -> None:
        self.error = error
        self.writes: list[str] = []

    async def update_status(self, resource: Resource, obj: dict[str, Any], **opts: Any) -> dict[str, Any]:
        self.writes.append(f"update_status {resource.plural}")
        raise self.error


class NullEvents:
    def event(self, obj: dict[str, Any], type_: str, reason: str, note: str) -> None:
        pass


def not_found_of(resource: Resource, name: str) -> NotFound:
    """The NotFound the API server answers for a deleted object, with its Status details."""
    details = {"name": name, "kind": resource.plural, **({"group": resource.group} if resource.group else {})}
    return NotFound(404, "NotFound", f'{resource.plural}.{resource.group} "{name}" not found', details)


def meta(name: str, namespace: str | None) -> dict[str, Any]:
    found = {"name": name, "uid": f"uid-{name}", "resourceVersion": "7", "generation": 1}
    return {**found, "namespace": namespace} if namespace else found


def playground_case(source: FakeInformerSource, client: Any, clock: FakeClock) -> tuple[Reconciler, dict[str, Any]]:
    obj = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": meta("p", "ns"),
        "spec": {"replicas": 1, "modelClaim": {"modelName": "missing"}},  # aborts: writes status only
    }
    return PlaygroundReconciler(client, source, NullEvents(), clock), obj  # type: ignore[arg-type]


def service_case(source: FakeInformerSource, client: Any, clock: FakeClock) -> tuple[Reconciler, dict[str, Any]]:
    settings = SettingsHolder()
    settings.update(GLOBAL_CONFIG)
    template = {"size": 1, "leaderTemplate": {"spec": {"containers": [{"name": "model-runner", "image": "x"}]}}}
    obj = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Service",
        "metadata": meta("s", "ns"),
        "spec": {"modelClaims": {"models": [{"name": "missing"}]}, "replicas": 1, "workloadTemplate": template},
    }
    reconciler = ServiceReconciler(client, source, NullEvents(), clock, settings, capacity=NodeCapacity(source))
    return reconciler, obj


def openmodel_case(source: FakeInformerSource, client: Any, clock: FakeClock) -> tuple[Reconciler, dict[str, Any]]:
    obj = {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": meta("m", None),
        "spec": {"familyName": "f", "source": {"uri": "host:///models/m"}},
    }
    return model_reconciler(client, source.informer_for(r.OPEN_MODELS).store, clock), obj


Case = Callable[[FakeInformerSource, Any, FakeClock], tuple[Reconciler, dict[str, Any]]]
CASES: list[tuple[Case, Resource]] = [
    (playground_case, r.PLAYGROUNDS),
    (service_case, r.INFERENCE_SERVICES),
    (openmodel_case, r.OPEN_MODELS),
]


def count(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


async def reconcile_once(
    name: str, case: Case, resource: Resource, error_for: Callable[[dict[str, Any]], NotFound]
) -> tuple[DeletedEverywhere, list[MutableMapping[str, Any]]]:
    """Run a controller over the case's object until its first reconcile has ended; its client and the log."""
    clock, source = FakeClock(), FakeInformerSource()
    client = DeletedEverywhere(NotFound(404, "NotFound", ""))
    reconciler, obj = case(source, client, clock)
    client.error = error_for(obj)
    controller = ControllerBuilder(name).for_(resource).with_options(clock=clock).build(reconciler, source)
    source.mark_all_synced()
    with capture_logs() as logs:
        async with started(controller):
            source.informer_for(resource).add(obj)
            ended = ("success", "error")
            await eventually(lambda: sum(count(RECONCILES, controller=name, result=result) for result in ended) == 1)
    return client, logs


@pytest.mark.parametrize(("case", "resource"), CASES, ids=[resource.kind for _, resource in CASES])
async def test_the_not_found_of_an_object_deleted_meanwhile_is_a_quiet_success(
    case: Case, resource: Resource, request: pytest.FixtureRequest
) -> None:
    name = f"deleted-{request.node.callspec.id}"
    client, logs = await reconcile_once(
        name, case, resource, lambda obj: not_found_of(resource, obj["metadata"]["name"])
    )
    assert client.writes == [f"update_status {resource.plural}"]
    assert count(RECONCILES, controller=name, result="success") == 1
    assert count("controller_runtime_reconcile_errors_total", controller=name) == 0
    assert [log for log in logs if log["log_level"] == "error"] == []


async def test_the_not_found_of_the_namespace_is_a_quiet_success_too() -> None:
    gone = NotFound(404, "NotFound", 'namespaces "ns" not found', {"name": "ns", "kind": "namespaces"})
    client, logs = await reconcile_once("deleted-namespace", playground_case, r.PLAYGROUNDS, lambda obj: gone)
    assert client.writes == ["update_status playgrounds"]
    assert count("controller_runtime_reconcile_errors_total", controller="deleted-namespace") == 0
    assert [log for log in logs if log["log_level"] == "error"] == []


@pytest.mark.parametrize(
    "details",
    [
        {},  # "404 page not found": the resource type itself is missing (a CRD not installed)
        {"name": "someone-else", "group": "inference.llmaz.io", "kind": "playgrounds"},
        {"name": "p", "group": "inference.llmaz.io", "kind": "services"},  # the same name, of another kind
    ],
)
async def test_a_not_found_about_anything_else_is_still_an_error(
    details: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    name = f"other-404-{request.node.callspec.id}"
    error = NotFound(404, "NotFound", "not found", details)
    _, logs = await reconcile_once(name, playground_case, r.PLAYGROUNDS, lambda obj: error)
    assert count("controller_runtime_reconcile_errors_total", controller=name) == 1
    assert [log["event"] for log in logs if log["log_level"] == "error"] == ["Reconciler error"]
