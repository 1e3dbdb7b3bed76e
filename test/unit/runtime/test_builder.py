"""ControllerBuilder wiring: for_, owns, watches, predicates and options."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llmaz.runtime.cache.interfaces import Obj
from llmaz.runtime.controller import ControllerBuilder, Request, Result, Scope
from llmaz.runtime.controller import predicate as p
from llmaz.runtime.resource import Resource
from llmaz_dev.testing import FakeClock, FakeInformerSource
from llmaz_dev.testing.runnables import stop
from llmaz_dev.testing.waiting import eventually

from .helpers import settle

PLAYGROUND = Resource("inference.llmaz.io", "v1alpha1", "playgrounds", "Playground", namespaced=True)
SERVICE = Resource("inference.llmaz.io", "v1alpha1", "services", "Service", namespaced=True)
MODEL = Resource("llmaz.io", "v1alpha1", "openmodels", "OpenModel", namespaced=False)


class RecordingReconciler:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.requests.append(request)
        return Result()


def playground(name: str, generation: int = 1, model: str = "llama", status: Any = None) -> Obj:
    meta = {"name": name, "namespace": "ns", "generation": generation}
    return {"metadata": meta, "spec": {"model": model}, "status": status or {}}


def playgrounds_using(source: FakeInformerSource) -> Any:
    def mapper(model: Obj) -> list[Request]:
        store = source.informer_for(PLAYGROUND).store
        name = model["metadata"]["name"]
        return [
            Request(pg["metadata"]["namespace"], pg["metadata"]["name"])
            for pg in store.list()
            if pg["spec"]["model"] == name
        ]

    return mapper


async def test_built_controller_reconciles_primary_owned_and_mapped_objects(
    request: pytest.FixtureRequest,
) -> None:
    source = FakeInformerSource()
    reconciler = RecordingReconciler()
    controller = (
        ControllerBuilder(request.node.name)
        .for_(PLAYGROUND, predicates=[p.generation_changed()])
        .owns(SERVICE)
        .watches(MODEL, playgrounds_using(source))
        .with_options(clock=FakeClock())
        .build(reconciler, source)
    )
    assert set(source.informers) == {PLAYGROUND, SERVICE, MODEL}
    source.mark_all_synced()
    task = asyncio.create_task(controller.run())
    await settle()

    source.informer_for(PLAYGROUND).add(playground("pg1"))
    await eventually(lambda: reconciler.requests == [Request("ns", "pg1")])
    source.informer_for(PLAYGROUND).update(playground("pg1", status={"phase": "Ready"}))  # filtered out
    owned = {
        "metadata": {
            "name": "pg1",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "inference.llmaz.io/v1alpha1",
                    "kind": "Playground",
                    "name": "pg1",
                    "controller": True,
                }
            ],
        }
    }
    source.informer_for(SERVICE).add(owned)
    await eventually(lambda: len(reconciler.requests) == 2)
    source.informer_for(MODEL).add({"metadata": {"name": "llama"}})
    await eventually(lambda: len(reconciler.requests) == 3)
    await settle()
    await stop(task)
    assert reconciler.requests == [Request("ns", "pg1")] * 3


def test_options_reach_the_controller_and_keep_their_defaults(request: pytest.FixtureRequest) -> None:
    source = FakeInformerSource()
    default = ControllerBuilder("default-" + request.node.name).for_(PLAYGROUND).build(RecordingReconciler(), source)
    assert default.options.max_concurrent_reconciles == 1
    assert default.options.cache_sync_timeout == 120.0
    assert default.needs_leader_election is True
    assert default.options.kind == "Playground"

    tuned = (
        ControllerBuilder("tuned-" + request.node.name)
        .for_(PLAYGROUND)
        .with_options(max_concurrent_reconciles=4, needs_leader_election=False)
        .with_options(cache_sync_timeout=5.0)
        .build(RecordingReconciler(), source)
    )
    assert tuned.options.max_concurrent_reconciles == 4
    assert tuned.options.cache_sync_timeout == 5.0
    assert tuned.needs_leader_election is False


def test_a_controller_of_only_mapped_watches_is_allowed() -> None:
    controller = (
        ControllerBuilder("mapped-only")
        .watches(MODEL, lambda o: [Request("", o["metadata"]["name"])])
        .build(RecordingReconciler(), FakeInformerSource())
    )
    assert controller.name == "mapped-only"


@pytest.mark.parametrize(
    ("builder", "message"),
    [
        (ControllerBuilder("x"), "for_"),
        (ControllerBuilder("x").owns(SERVICE), "owns"),
    ],
)
def test_build_rejects_a_controller_with_nothing_to_reconcile(builder: ControllerBuilder, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        builder.build(RecordingReconciler(), FakeInformerSource())


def test_for_can_be_given_once() -> None:
    with pytest.raises(ValueError, match="already"):
        ControllerBuilder("x").for_(PLAYGROUND).for_(SERVICE)


def test_max_concurrent_reconciles_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ControllerBuilder("x").for_(PLAYGROUND).with_options(max_concurrent_reconciles=0).build(
            RecordingReconciler(), FakeInformerSource()
        )


def test_a_scoped_watch_gets_its_own_informer_for_that_scope() -> None:
    config_maps = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
    source = FakeInformerSource()

    class Noop:
        async def reconcile(self, request: Request) -> Result:
            raise AssertionError("not called")

    ControllerBuilder("scoped").watches(
        config_maps,
        lambda obj: [],
        scope=Scope(namespace="llmaz-system", field_selector="metadata.name=llmaz-global-config"),
    ).build(Noop(), source)
    assert list(source.scoped) == [(config_maps, "llmaz-system", None, "metadata.name=llmaz-global-config")]
    assert config_maps not in source.informers
