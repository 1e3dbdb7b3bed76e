"""The autoscaler runnable against fake informers, a fake API (Playground scale and the Lease) and a fake clock:
what it reads as load, what it writes and records, and that only the Lease's holder decides."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from llmaz.apis import constants as c
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.scaling.autoscaler import LEASE_NAME, Autoscaler, AutoscalerMetrics, AutoscalerOptions
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import error_from_status
from llmaz.runtime.events import EventRecorder
from llmaz.runtime.leaderelection import LEASES
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.runnables import started, stop
from llmaz_dev.testing.waiting import eventually

from .support import NAMESPACE, WAIT, Cluster, endpoint_slice, playground
from .test_waker import Events, FakeApi

E1, E2 = Endpoint("10.0.0.1", 8080), Endpoint("10.0.0.2", 8080)
REQUESTS = {"targetPerReplica": 10, "stableWindow": "60s", "panicWindow": "6s", "scaleDownDelay": "5m"}


class Signals:
    """`LoadSignals` whose answers the test sets per endpoint (None: not known)."""

    def __init__(self) -> None:
        self.loads: dict[Endpoint, EngineLoad | None] = {}

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return self.loads.get(endpoint)


class Api(FakeApi):
    """The fake Playground API, plus the Lease (`get`/`create`/`update`, with the API server's conflicts) and
    `guarded`, whose guard runs before every write."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.leases: dict[str, dict[str, Any]] = {}

    def guarded(self, guard: Callable[[], None]) -> Api:
        view = copy.copy(self)
        plain = self.patch

        async def patch(*args: Any, **kwargs: Any) -> dict[str, Any]:
            guard()
            return await plain(*args, **kwargs)

        view.patch = patch  # type: ignore[method-assign]
        return view

    async def get(self, resource: Resource, name: str, namespace: str | None = None, **_: Any) -> dict[str, Any]:
        assert resource == LEASES
        if name not in self.leases:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})
        return copy.deepcopy(self.leases[name])

    async def create(self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **_: Any) -> Any:
        assert resource == LEASES
        name = obj["metadata"]["name"]
        if name in self.leases:
            raise error_from_status(409, {"kind": "Status", "reason": "AlreadyExists"})
        return self._store_lease(obj)

    async def update(self, resource: Resource, obj: dict[str, Any], **_: Any) -> Any:
        assert resource == LEASES
        stored = self.leases[obj["metadata"]["name"]]
        if stored["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            raise error_from_status(409, {"kind": "Status", "reason": "Conflict"})
        return self._store_lease(obj)

    def _store_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def holder(self) -> str | None:
        lease = self.leases.get(LEASE_NAME)
        return None if lease is None else lease["spec"].get("holderIdentity")


def autoscaled(name: str = "p", replicas: int = 2, **requests: Any) -> dict[str, Any]:
    found = playground(name, "m")
    found["spec"]["replicas"] = replicas
    trigger = {**REQUESTS, **requests}
    found["spec"]["elasticConfig"] = {"minReplicas": 1, "maxReplicas": 8, "scaleTrigger": {"requests": trigger}}
    found["metadata"]["resourceVersion"] = "1"
    return found


class Setup:
    def __init__(self, *playgrounds: dict[str, Any], endpoints: tuple[Endpoint, ...] = (E1, E2)) -> None:
        self.cluster = Cluster().synced()
        for obj in playgrounds:
            self.cluster.playgrounds.add(obj)
            name = obj["metadata"]["name"]
            ready = [(e.address, True, False) for e in endpoints]
            self.cluster.slices.add(endpoint_slice(f"{name}-lb-0", f"{name}-lb", 8080, *ready))
        self.catalog = self.cluster.catalog()
        self.api = Api(self.cluster.playgrounds)
        self.events = Events()
        self.signals = Signals()
        self.in_flight = InFlight()
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        self.metrics = AutoscalerMetrics(self.registry)  # shared by this setup's replicas, for the test to read
        self.scale = PlaygroundScale(cast(Client, self.api), cast(EventRecorder, self.events))

    def autoscaler(self, identity: str = "a", held: Callable[[str], int] | None = None, **options: Any) -> Autoscaler:
        return Autoscaler(
            self.catalog,
            cast(Client, self.api),
            cast(EventRecorder, self.events),
            self.signals,
            self.in_flight,
            AutoscalerOptions(lease_namespace="gw", identity=identity, **options),
            self.metrics,
            clock=self.clock,
            held=held,
        )

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(f"llmaz_gateway_autoscaler_{name}", labels)

    def replicas(self, name: str = "p") -> int:
        stored = self.cluster.playgrounds.store.get(f"{NAMESPACE}/{name}")
        assert stored is not None
        return int(stored["spec"]["replicas"])


def load(running: int, waiting: int = 0) -> EngineLoad:
    return EngineLoad(running=running, waiting=waiting)


async def test_the_engines_load_scales_up_through_the_scale_subresource_with_an_event() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(20, 5), E2: load(15, 5)}  # 45 requests, 10 per replica
    autoscaler = s.autoscaler()
    await autoscaler.tick(s.scale)
    assert s.api.scaled == [("p", 5)]
    assert s.events.recorded == [
        ("p", "Normal", "ScaledUp", "Scaled from 2 to 5 replicas: load 45 over the panic window, target 10 per replica")
    ]
    key = f"{NAMESPACE}/p"
    assert (s.gauge("desired_replicas", playground=key), s.gauge("current_replicas", playground=key)) == (5, 2)
    assert s.gauge("load", playground=key) == 45
    assert s.gauge("window", playground=key, window="panic") == 1
    assert s.gauge("window", playground=key, window="stable") == 0
    assert s.gauge("signal_missing", playground=key) == 0


async def test_the_autoscaler_reports_each_playgrounds_max_replicas_and_target_and_forgets_them_with_it() -> None:
    s = Setup(autoscaled(replicas=8, targetPerReplica=10))
    s.signals.loads = {E1: load(60, 30), E2: load(50, 0)}
    autoscaler = s.autoscaler()
    await autoscaler.tick(s.scale)
    key = f"{NAMESPACE}/p"
    assert (s.gauge("max_replicas", playground=key), s.gauge("target_per_replica", playground=key)) == (8, 10)
    assert s.gauge("desired_replicas", playground=key) == 8
    s.cluster.playgrounds.delete(autoscaled(replicas=8))
    await autoscaler.tick(s.scale)
    assert (s.gauge("max_replicas", playground=key), s.gauge("target_per_replica", playground=key)) == (None, None)


async def test_no_write_when_the_count_is_right() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(10), E2: load(8)}
    await s.autoscaler().tick(s.scale)
    assert (s.api.scaled, s.events.recorded) == ([], [])
    assert s.gauge("window", playground=f"{NAMESPACE}/p", window="stable") == 1


async def test_an_engine_without_a_signal_counts_this_gateways_requests_to_it() -> None:
    s = Setup(autoscaled(replicas=1))
    s.signals.loads = {E1: load(4)}  # E2 says nothing: the gateway has 9 requests in flight to it
    for _ in range(9):
        s.in_flight.acquire(E2)
    autoscaler = s.autoscaler()
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled()) == (13, 2)
    await autoscaler.tick(s.scale)
    assert s.api.scaled == [("p", 2)]


async def test_replicas_still_loading_are_not_capacity_for_the_panic_window() -> None:
    # 4 replicas, of which only E1 is ready: 25 requests are over twice its capacity (2 x 10), though not over
    # twice that of all four (80). Panic: the count rises at once to what the load wants, 3, and is held at 4.
    s = Setup(autoscaled(replicas=4), endpoints=(E1,))
    s.signals.loads = {E1: load(25)}
    autoscaler = s.autoscaler()
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled()) == (25, 1)
    await autoscaler.tick(s.scale)
    assert s.gauge("window", playground=f"{NAMESPACE}/p", window="panic") == 1


async def test_no_signal_from_any_engine_holds_the_count_and_says_so() -> None:
    s = Setup(autoscaled(replicas=4))
    for _ in range(3):
        s.in_flight.acquire(E1)  # only this gateway's view: not enough to scale down on
    autoscaler = s.autoscaler()
    for _ in range(3):
        await autoscaler.tick(s.scale)
        s.clock.step(2)
    assert (s.api.scaled, s.events.recorded) == ([], [])
    key = f"{NAMESPACE}/p"
    assert s.gauge("signal_missing", playground=key) == 1
    assert s.gauge("window", playground=key, window="no-signal") == 1
    assert s.gauge("load", playground=key) is None


async def test_a_playground_without_ready_endpoints_is_held() -> None:
    s = Setup(autoscaled(replicas=3), endpoints=())
    await s.autoscaler().tick(s.scale)
    assert s.api.scaled == []
    assert s.gauge("signal_missing", playground=f"{NAMESPACE}/p") == 1


async def test_scale_down_is_one_replica_after_the_delay() -> None:
    s = Setup(autoscaled(replicas=3))
    s.signals.loads = {E1: load(0), E2: load(0)}
    autoscaler = s.autoscaler()
    for _ in range(150):  # 300 s: the delay, not yet passed for a history this young
        await autoscaler.tick(s.scale)
        s.clock.step(2)
    assert s.api.scaled == []
    await autoscaler.tick(s.scale)
    assert s.api.scaled == [("p", 2)]
    assert s.events.recorded[-1][2:] == (
        "ScaledDown",
        "Scaled from 3 to 2 replicas: load 0 over the stable window, target 10 per replica",
    )


async def test_an_asleep_playground_that_opted_in_stays_asleep() -> None:
    pg = autoscaled(replicas=0)
    pg["metadata"]["annotations"] = {c.SCALE_TO_ZERO_AFTER_ANNOTATION: "5m"}
    s = Setup(pg, endpoints=())
    await s.autoscaler().tick(s.scale)
    assert s.api.scaled == []
    # With scale to zero off in this gateway, zero is below the minimum.
    await s.autoscaler(scale_to_zero=False).tick(s.scale)
    assert s.api.scaled == [("p", 1)]


async def test_a_stored_policy_admission_would_deny_is_left_alone_with_one_warning() -> None:
    s = Setup(autoscaled(replicas=2, targetPerReplica=0))
    s.signals.loads = {E1: load(50)}
    autoscaler = s.autoscaler()
    await autoscaler.tick(s.scale)
    await autoscaler.tick(s.scale)
    assert s.api.scaled == []
    assert [(reason, note.split(":")[0]) for _, _, reason, note in s.events.recorded] == [
        ("InvalidAutoscaling", "spec.elasticConfig.scaleTrigger.requests.targetPerReplica")
    ]


async def test_someone_elses_change_wins_and_records_nothing() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(30), E2: load(30)}
    original = s.api.get_scale

    async def changed_first(*args: Any, **kwargs: Any) -> dict[str, Any]:
        stored = copy.deepcopy(s.cluster.playgrounds.store.get(f"{NAMESPACE}/p"))
        assert stored is not None
        stored["spec"]["replicas"] = 3
        s.api._write(stored)
        s.api.get_scale = original  # type: ignore[method-assign]
        return await original(*args, **kwargs)

    s.api.get_scale = changed_first  # type: ignore[method-assign]
    await s.autoscaler().tick(s.scale)
    assert (s.api.scaled, s.events.recorded) == ([], [])


async def test_the_gauges_go_when_the_playground_stops_being_autoscaled() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(10)}
    autoscaler = s.autoscaler()
    await autoscaler.tick(s.scale)
    key = f"{NAMESPACE}/p"
    assert s.gauge("desired_replicas", playground=key) == 2
    plain = autoscaled()
    del plain["spec"]["elasticConfig"]
    s.cluster.playgrounds.update(plain)
    await autoscaler.tick(s.scale)
    assert s.gauge("desired_replicas", playground=key) is None
    assert s.gauge("window", playground=key, window="stable") is None


async def test_only_the_lease_holder_decides_and_a_successor_resumes_from_the_current_count() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(25), E2: load(25)}  # 50 requests: 5 replicas
    first, second = s.autoscaler("a"), s.autoscaler("b")
    async with started(first) as (first_task,), started(second):
        await eventually(s.clock.stepping(lambda: s.api.scaled), WAIT, "a scale-up")
        assert s.api.holder() == "a"  # started first, so it took the free Lease
        assert s.api.scaled == [("p", 5)]
        assert [reason for _, _, reason, _ in s.events.recorded] == ["ScaledUp"]
        await stop(first_task)  # a clean stop releases the Lease
        await eventually(s.clock.stepping(lambda: s.api.holder() == "b"), WAIT, "the second replica leading")
        # The new leader decides from the current count (5, which the load wants): it writes nothing.
        deciding_since = s.clock.now()
        await eventually(s.clock.stepping(lambda: s.clock.now() >= deciding_since + 30), WAIT, "30 s of deciding")
        assert s.api.scaled == [("p", 5)]
        assert s.replicas() == 5


async def test_a_replica_that_loses_the_lease_stops_deciding_and_keeps_running() -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(10)}
    autoscaler = s.autoscaler("a")
    async with started(autoscaler) as (task,):
        key = f"{NAMESPACE}/p"
        await eventually(s.clock.stepping(lambda: s.gauge("desired_replicas", playground=key) == 2), WAIT, "deciding")
        assert s.api.holder() == "a"

        def renewed_by_b() -> None:
            # Another replica holds the Lease (as after this one's renewals failed), and renews it.
            lease = s.api.leases[LEASE_NAME]
            lease["spec"].update(holderIdentity="b", renewTime=str(s.clock.now()))
            s.api.version += 1
            lease["metadata"]["resourceVersion"] = str(s.api.version)

        renewed_by_b()

        def stopped_deciding() -> bool:
            renewed_by_b()
            return s.gauge("desired_replicas", playground=key) is None

        await eventually(
            s.clock.stepping(stopped_deciding),
            WAIT,
            "the gauges of a replica that stopped deciding removed",
        )
        s.signals.loads = {E1: load(80)}  # load that would scale it up, for a replica still deciding
        for _ in range(20):
            renewed_by_b()
            s.clock.step(2)
            await asyncio.sleep(0)
        assert not task.done()
        assert s.api.scaled == []
        assert s.api.holder() == "b"


@pytest.mark.parametrize("interval", [0.5, 5.0])
async def test_it_decides_every_interval(interval: float) -> None:
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(10)}
    ticks: list[float] = []
    autoscaler = s.autoscaler(interval=interval)
    original = autoscaler.tick

    async def counted(scale: PlaygroundScale) -> None:
        ticks.append(s.clock.now())
        await original(scale)

    autoscaler.tick = counted  # type: ignore[method-assign]
    async with started(autoscaler):
        await eventually(s.clock.stepping(lambda: len(ticks) >= 4), WAIT, "four decisions")
    assert [round(b - a, 6) for a, b in itertools.pairwise(ticks)][:3] == [interval] * 3


async def test_requests_flow_control_holds_for_the_model_count_as_load() -> None:
    # The engines report 20 (10 each, the target): flow control holds 25 more in this gateway, which the engines
    # do not see. 45 requests want 5 replicas.
    s = Setup(autoscaled(replicas=2))
    s.signals.loads = {E1: load(8, 2), E2: load(8, 2)}
    held = {"m": 25}
    autoscaler = s.autoscaler(held=lambda model: held.get(model, 0))
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled()) == (45, 2)
    await autoscaler.tick(s.scale)
    assert s.api.scaled == [("p", 5)]
    assert s.events.recorded[0][2:] == (
        "ScaledUp",
        "Scaled from 2 to 5 replicas: load 45 over the panic window, target 10 per replica",
    )


async def test_held_requests_are_load_while_no_replica_is_ready_yet() -> None:
    # One replica starting, none ready: 30 requests held in the flow queue meanwhile want 3 replicas at once.
    s = Setup(autoscaled(replicas=1), endpoints=())
    autoscaler = s.autoscaler(held=lambda model: 30 if model == "m" else 0)
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled()) == (30, 0)
    await autoscaler.tick(s.scale)
    assert s.api.scaled == [("p", 3)]
    assert s.gauge("signal_missing", playground=f"{NAMESPACE}/p") == 0


async def test_held_requests_are_shared_evenly_between_the_playgrounds_serving_the_model() -> None:
    s = Setup(autoscaled("p", replicas=1), autoscaled("q", replicas=1), endpoints=(E1,))
    s.signals.loads = {E1: load(0)}
    autoscaler = s.autoscaler(held=lambda model: 30 if model == "m" else 0)
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled("p")) == (15, 1)
    assert autoscaler.load(f"{NAMESPACE}/q", autoscaled("q")) == (15, 1)


async def test_nothing_held_leaves_the_load_as_the_engines_say_and_unknown_without_them() -> None:
    s = Setup(autoscaled(replicas=3), endpoints=())
    autoscaler = s.autoscaler(held=lambda model: 0)
    assert autoscaler.load(f"{NAMESPACE}/p", autoscaled()) == (None, 0)
    await autoscaler.tick(s.scale)
    assert s.api.scaled == []
