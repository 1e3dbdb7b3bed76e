"""Scale from zero through the gateway, and back to zero when idle, against fake informers and a fake API.

The fake API applies the Waker's and idle detection's writes to the Playground in the fake informer the way the API
server does: the last request time is a merge patch of an annotation, and a scale is read from the scale
subresource and patched there naming the resourceVersion it was read at, so a write made between the read and the
patch makes it a 409 (and `PlaygroundScale.scale_if` reads again). The catalog sees every change as an event. A
test plays the engine: once the Playground has a replica, it adds a ready endpoint for it.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any, cast

from structlog.testing import capture_logs

from llmaz.apis import constants as c
from llmaz.apis.resources import PLAYGROUNDS
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz.gateway.routing.inflight import InFlight
from llmaz.gateway.routing.routes import Endpoint
from llmaz.gateway.scaling import scaletozero
from llmaz.gateway.scaling.idle import IdleDetector, idle_controller
from llmaz.gateway.scaling.scale import PlaygroundScale
from llmaz.gateway.scaling.waker import Waker
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import ApiError, error_from_status
from llmaz.runtime.controller import Request, Result
from llmaz.runtime.events import EventRecorder
from llmaz.runtime.resource import Resource
from llmaz_dev.testing.informer import FakeInformer
from llmaz_dev.testing.runnables import stop
from llmaz_dev.testing.waiting import eventually

from .support import NAMESPACE, WAIT, Cluster, endpoint_slice, engines, open_model, playground, running_gateway

CHAT = "/v1/chat/completions"
NOW = 1_800_000_000.0


class FakeApi:
    """`Client.get_scale` and `Client.patch` for Playgrounds, applied to the objects in `informer` as the API
    server does: every write bumps the resourceVersion, a Scale omits a zero count, and a scale patch naming a
    stale resourceVersion is a 409."""

    def __init__(self, informer: FakeInformer) -> None:
        self.informer = informer
        self.scaled: list[tuple[str, int]] = []  # (name, replicas) of every scale patch that applied
        self.refuse: ApiError | None = None  # for scale patches
        self.refuse_annotations: ApiError | None = None  # for the last request time
        self.on_scaled: list[Any] = []
        self.on_read_scale: list[Any] = []  # called after each read of a scale, before the patch that may follow
        self.version = 0

    def _stored(self, name: str, namespace: str | None) -> dict[str, Any]:
        stored = self.informer.store.get(f"{namespace}/{name}")
        if stored is None:
            raise error_from_status(404, {"kind": "Status", "reason": "NotFound"})
        return copy.deepcopy(stored)

    def _write(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.informer.update(obj)

    async def get_scale(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        assert resource == PLAYGROUNDS
        await asyncio.sleep(0)  # a real call yields; concurrent callers interleave here
        obj = self._stored(name, namespace)
        replicas = obj["spec"].get("replicas", 1)
        version = obj["metadata"].get("resourceVersion", "0")
        for callback in self.on_read_scale:
            callback(obj)
        return {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas} if replicas else {}}

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        assert resource == PLAYGROUNDS
        await asyncio.sleep(0)
        obj = self._stored(name, namespace)
        if subresource == "scale":
            if self.refuse is not None:
                raise self.refuse
            if body["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion", "0"):
                raise error_from_status(409, {"kind": "Status", "reason": "Conflict", "message": "modified"})
            obj["spec"]["replicas"] = body["spec"]["replicas"]
            self.scaled.append((name, body["spec"]["replicas"]))
        else:
            if self.refuse_annotations is not None:
                raise self.refuse_annotations
            obj["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        self._write(obj)
        if subresource == "scale":
            for callback in self.on_scaled:
                callback(obj)
        return obj


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, note: str, **_: Any) -> None:
        self.recorded.append((obj["metadata"]["name"], type_, reason, note))


def asleep(name: str, model: str, after: str = "5m", replicas: int = 0) -> dict[str, Any]:
    found = playground(name, model)
    found["metadata"]["annotations"] = {c.SCALE_TO_ZERO_AFTER_ANNOTATION: after}
    found["metadata"]["creationTimestamp"] = "2027-01-15T07:00:00Z"
    found["spec"]["replicas"] = replicas
    return found


@dataclass
class Scaling:
    """Waking and idle detection over the fake API, sharing one in-flight count with the gateway."""

    waker: Waker
    idle: IdleDetector
    in_flight: InFlight

    catalog: Catalog

    async def check(self) -> list[Result]:
        """Idle detection's look at every Playground, as the controller takes it when each key comes up."""
        keys = [Request(pg["metadata"]["namespace"], pg["metadata"]["name"]) for pg in self.catalog.playgrounds()]
        return [await self.idle.reconcile(key) for key in keys]


class FakeActivity:
    """The engines' own activity as the signals report it: seconds since each endpoint's engine last worked."""

    def __init__(self) -> None:
        self.idle: dict[Endpoint, float] = {}

    def idle_for(self, endpoint: Endpoint) -> float | None:
        return self.idle.get(endpoint)


def setup(
    cluster: Cluster, clock: list[float] | None = None, activity: FakeActivity | None = None
) -> tuple[Scaling, FakeApi, Events, Catalog]:
    """Scaling over the fake API, and the catalog it reads (the gateway must read the same one)."""
    api, events, catalog = FakeApi(cluster.playgrounds), Events(), cluster.catalog()
    now = clock or [NOW]
    scale = PlaygroundScale(cast(Client, api), cast(EventRecorder, events), wall_clock=lambda: now[0])
    in_flight = InFlight(wall_clock=lambda: now[0])
    idle = IdleDetector(catalog, scale, in_flight, activity)
    return Scaling(Waker(catalog, scale), idle, in_flight, catalog), api, events, catalog


def engine_starts(cluster: Cluster, endpoint: Endpoint) -> Any:
    """What the cluster does once a Playground has a replica: an endpoint for it becomes ready (a moment later)."""

    def started(obj: dict[str, Any]) -> None:
        if obj["spec"]["replicas"] > 0:
            name = obj["metadata"]["name"]
            ready = (endpoint.address, True, False)
            slice_ = endpoint_slice(f"{name}-lb-x", f"{name}-lb", endpoint.port, ready)
            asyncio.get_running_loop().call_soon(cluster.slices.add, slice_)

    return started


async def test_ten_concurrent_first_requests_wake_the_model_once_and_all_get_answers() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(asleep("p", "m"))
        scaling, api, events, catalog = setup(cluster)
        api.on_scaled.append(engine_starts(cluster, engine.endpoint))
        async with running_gateway(cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight) as gw:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            answers = await asyncio.gather(*(gw.post(CHAT, body) for _ in range(10)))
        assert [status for status, _ in answers] == [200] * 10
        assert api.scaled == [("p", 1)]
        assert [(name, reason) for name, _, reason, _ in events.recorded] == [("p", "ScaledFromZero")]
        stored = cluster.playgrounds.store.get(f"{NAMESPACE}/p")
        assert stored is not None
        # Recorded before the scale-up, so no idle check puts it straight back to sleep.
        assert stored["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] == scaletozero.format_time(NOW)


async def test_another_replica_waking_it_first_is_no_error_and_records_nothing() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.playgrounds.add(asleep("p", "m"))
        scaling, api, events, catalog = setup(cluster)
        original = api.get_scale

        async def another_replica_first(*args: Any, **kwargs: Any) -> dict[str, Any]:
            # Between this replica's touch and its read, another replica scales the Playground up.
            woken = copy.deepcopy(cluster.playgrounds.store.get(f"{NAMESPACE}/p"))
            assert woken is not None
            woken["spec"]["replicas"] = 1
            api._write(woken)
            engine_starts(cluster, engine.endpoint)(woken)
            api.get_scale = original  # type: ignore[method-assign]
            return await original(*args, **kwargs)

        api.get_scale = another_replica_first  # type: ignore[method-assign]
        async with running_gateway(cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight) as gw:
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []})
        assert status == 200
        assert api.scaled == []
        assert events.recorded == []


async def test_a_concurrent_write_between_read_and_patch_is_read_again() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(asleep("p", "m", replicas=1))
    scaling, api, events, _ = setup(cluster)
    original = api.patch
    interfered = False

    async def someone_writes_first(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal interfered
        if kwargs.get("subresource") == "scale" and not interfered:
            interfered = True  # e.g. the controller's status write: the count is unchanged, the version is not
            stored = copy.deepcopy(cluster.playgrounds.store.get(f"{NAMESPACE}/p"))
            assert stored is not None
            api._write(stored)
        return await original(*args, **kwargs)

    api.patch = someone_writes_first  # type: ignore[method-assign]
    await scaling.check()
    assert interfered
    assert api.scaled == [("p", 0)]
    assert [reason for _, _, reason, _ in events.recorded] == ["ScaledToZero"]


async def test_a_model_that_did_not_opt_in_answers_503_at_once_and_is_not_scaled() -> None:
    cluster = Cluster().synced()
    sleeping = asleep("p", "m")
    del sleeping["metadata"]["annotations"]
    cluster.playgrounds.add(sleeping)
    scaling, api, _, catalog = setup(cluster)
    async with running_gateway(cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight) as gw:
        status, answer = await gw.post(CHAT, {"model": "m", "messages": []})
    assert status == 503
    assert answer["error"]["code"] == "model_not_ready"
    assert api.scaled == []


async def test_a_model_that_does_not_become_ready_in_time_is_a_504() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(asleep("p", "m"))
    scaling, api, _, catalog = setup(cluster)
    options = GatewayOptions(wake_timeout=0.2)
    async with running_gateway(cluster, options, catalog=catalog, waker=scaling.waker) as gw:
        status, answer = await gw.post(CHAT, {"model": "m", "messages": []})
    assert status == 504
    assert answer["error"]["code"] == "model_wake_timeout"
    assert "had no ready endpoint within 0 s" in answer["error"]["message"]
    assert api.scaled == [("p", 1)]


async def test_a_refused_scale_up_is_a_503_whose_why_is_in_the_log_only() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(asleep("p", "m"))
    scaling, api, _, catalog = setup(cluster)
    api.refuse = error_from_status(
        403, {"kind": "Status", "reason": "Forbidden", "message": "playgrounds/scale is forbidden"}
    )
    async with running_gateway(cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight) as gw:
        with capture_logs() as logs:
            status, answer = await gw.post(CHAT, {"model": "m", "messages": []})
    assert status == 503
    assert answer["error"]["code"] == "model_wake_failed"
    assert answer["error"]["message"] == "The model `m` is scaled to zero and could not be scaled up. Retry later."
    [line] = [log for log in logs if log["event"] == "request"]
    assert "playgrounds/scale is forbidden" in line["detail"]


async def test_an_idle_model_is_put_to_sleep_once_and_a_busy_one_keeps_the_shared_time_fresh() -> None:
    cluster = Cluster().synced()
    clock = [NOW]
    cluster.playgrounds.add(asleep("idle", "a", replicas=2))  # no request since creation, an hour ago
    busy = asleep("busy", "b", replicas=1)
    busy["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] = "2027-01-15T07:50:00Z"
    cluster.playgrounds.add(busy)
    scaling, api, events, _ = setup(cluster, clock=clock)
    scaling.in_flight.started("b")

    first = await scaling.check()
    assert await scaling.check() == [Result(), Result(requeue_after=75.0)]  # idempotent: asleep, and still busy
    assert first == [Result(), Result(requeue_after=75.0)]  # a busy one is looked at again a quarter later

    assert api.scaled == [("idle", 0)]
    assert events.recorded == [("idle", "Normal", "ScaledToZero", "Scaled from 2 to 0 replicas: no request for 300s")]
    refreshed = cluster.playgrounds.store.get(f"{NAMESPACE}/busy")
    assert refreshed is not None
    assert refreshed["spec"]["replicas"] == 1
    assert refreshed["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] == scaletozero.format_time(NOW)

    scaling.in_flight.finished("b")
    clock[0] += 299
    assert await scaling.check() == [Result(), Result(requeue_after=1.0)]  # looked at again when it is idle
    assert api.scaled == [("idle", 0)]  # not idle for 300 s yet since the refresh
    clock[0] += 1
    await scaling.check()
    assert api.scaled == [("idle", 0), ("busy", 0)]


async def test_a_bad_annotation_turns_scale_to_zero_off_with_one_warning() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(asleep("p", "m", after="5 minutes", replicas=1))
    scaling, api, events, _ = setup(cluster)
    await scaling.check()
    await scaling.check()
    assert api.scaled == []
    assert events.recorded == [
        (
            "p",
            "Warning",
            "InvalidScaleToZero",
            "annotation llmaz.io/scale-to-zero-after: '5 minutes' is not a duration: use seconds or h/m/s units, "
            "e.g. 300, 90s, 5m, 1h30m; scale to zero is off",
        )
    ]


async def test_the_idle_controller_puts_an_idle_playground_to_sleep_and_runs_until_stopped() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(asleep("p", "m", replicas=1))
    scaling, api, _, catalog = setup(cluster)
    asleep_now = asyncio.Event()
    api.on_scaled.append(lambda obj: asleep_now.set())
    task = asyncio.create_task(idle_controller(scaling.idle, catalog, scaling.in_flight).run())
    await asyncio.wait_for(asleep_now.wait(), WAIT)
    await stop(task, WAIT)
    assert api.scaled == [("p", 0)]


async def test_a_request_for_a_model_whose_shared_time_is_stale_refreshes_it_at_once() -> None:
    cluster = Cluster().synced()
    serving = asleep("p", "m", replicas=1)
    serving["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] = "2027-01-15T07:58:00Z"  # 2 min: stale
    cluster.playgrounds.add(serving)
    scaling, _, _, catalog = setup(cluster)
    controller = idle_controller(scaling.idle, catalog, scaling.in_flight)
    task = asyncio.create_task(controller.run())

    def shared_time() -> str | None:
        stored = cluster.playgrounds.store.get(f"{NAMESPACE}/p")
        return stored["metadata"]["annotations"].get(c.LAST_REQUEST_TIME_ANNOTATION) if stored else None

    try:
        # Looked at once (nothing in flight: the next look is when it would be idle, minutes away).
        await eventually(lambda: controller.queue.waiting == 1, WAIT, "the first look done")
        assert shared_time() == "2027-01-15T07:58:00Z"
        scaling.in_flight.started("m")
        await eventually(lambda: shared_time() == scaletozero.format_time(NOW), WAIT, "the shared time refreshed")
    finally:
        scaling.in_flight.finished("m")
        await stop(task, WAIT)


async def test_requests_that_start_and_end_between_two_looks_keep_the_model_awake_and_are_shared() -> None:
    cluster = Cluster().synced()
    clock = [NOW]
    used = asleep("p", "m", replicas=1)
    used["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] = scaletozero.format_time(NOW)
    cluster.playgrounds.add(used)
    scaling, api, events, _ = setup(cluster, clock=clock)
    assert await scaling.check() == [Result(requeue_after=300.0)]  # the next look: when it would be idle

    # Short requests, each started and ended well between two looks, for longer than the idle time.
    for _ in range(5):
        clock[0] += 100
        with scaling.in_flight.request("m"):
            pass
    assert scaling.in_flight.of_model("m") == 0
    looks = await scaling.check()

    assert api.scaled == []
    assert events.recorded == []
    stored = cluster.playgrounds.store.get(f"{NAMESPACE}/p")
    assert stored is not None  # moved to the last request, for the other replicas
    assert stored["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] == scaletozero.format_time(NOW + 500)
    assert looks == [Result(requeue_after=300.0)]  # idle 300 s after the last request, not after the shared time
    clock[0] += 300
    await scaling.check()
    assert api.scaled == [("p", 0)]


async def test_a_request_seen_here_keeps_the_model_awake_when_the_shared_time_cannot_be_written() -> None:
    cluster = Cluster().synced()
    stale = asleep("p", "m", replicas=1)
    stale["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] = "2027-01-15T07:50:00Z"  # 10 min ago
    cluster.playgrounds.add(stale)
    scaling, api, _, _ = setup(cluster)
    api.refuse_annotations = error_from_status(403, {"kind": "Status", "reason": "Forbidden", "message": "no"})
    with scaling.in_flight.request("m"):  # ended a moment ago
        pass
    assert await scaling.check() == [Result(requeue=True)]  # the write is retried with backoff
    assert api.scaled == []


DIRECT = Endpoint("10.0.0.9", 8080)


def used_directly(cluster: Cluster) -> None:
    """A running opted-in Playground, created an hour ago, with no request through the gateway, and one ready
    endpoint behind its `-lb` Service (which direct clients call)."""
    cluster.playgrounds.add(asleep("p", "m", replicas=1))
    cluster.slices.add(endpoint_slice("p-lb-x", "p-lb", DIRECT.port, (DIRECT.address, True, False)))


async def test_a_model_its_direct_clients_keep_busy_is_never_put_to_sleep() -> None:
    cluster, clock, activity = Cluster().synced(), [NOW], FakeActivity()
    used_directly(cluster)
    scaling, api, _, _ = setup(cluster, clock=clock, activity=activity)

    activity.idle[DIRECT] = 0.0  # the engine reports requests running now
    assert await scaling.check() == [Result(requeue_after=75.0)]
    stored = cluster.playgrounds.store.get(f"{NAMESPACE}/p")
    assert stored is not None
    assert stored["metadata"]["annotations"][c.LAST_REQUEST_TIME_ANNOTATION] == scaletozero.format_time(NOW)

    clock[0] += 60
    activity.idle[DIRECT] = 90.0  # it stopped 30 s after it was last seen working: the shared time is later
    assert await scaling.check() == [Result(requeue_after=240.0)]
    assert api.scaled == []
    clock[0] += 239
    activity.idle[DIRECT] = 5.0  # busy again a moment ago
    assert await scaling.check() == [Result(requeue_after=295.0)]
    assert api.scaled == []
    clock[0] += 295
    activity.idle[DIRECT] = 300.0
    await scaling.check()
    assert api.scaled == [("p", 0)]


async def test_a_request_that_arrives_while_the_scale_down_is_being_written_stops_it() -> None:
    cluster, clock = Cluster().synced(), [NOW]
    used_directly(cluster)
    scaling, api, events, _ = setup(cluster, clock=clock, activity=FakeActivity())
    api.on_read_scale.append(lambda _: scaling.in_flight.started("m"))  # between the decision and the patch

    assert await scaling.check() == [Result(requeue_after=75.0)]
    assert api.scaled == []
    assert events.recorded == []


async def test_an_engine_that_starts_working_while_the_scale_down_is_being_written_stops_it() -> None:
    cluster, clock, activity = Cluster().synced(), [NOW], FakeActivity()
    used_directly(cluster)
    activity.idle[DIRECT] = 3600.0
    scaling, api, _, _ = setup(cluster, clock=clock, activity=activity)
    api.on_read_scale.append(lambda _: activity.idle.update({DIRECT: 0.0}))  # a direct client's request

    assert await scaling.check() == [Result(requeue_after=75.0)]
    assert api.scaled == []


async def test_a_key_that_may_not_wake_gets_503_and_a_key_that_may_wakes_the_model() -> None:
    from llmaz.gateway.proxy.auth import Authenticator
    from llmaz.gateway.proxy.keys import SecretKeys
    from llmaz_dev.testing.informer import FakeInformer

    from .support import secret

    secrets = FakeInformer()
    secrets.add(secret("viewer", key="sk-viewer", tenant="viewers", may_wake="false"))
    secrets.add(secret("owner", key="sk-owner", tenant="owners"))
    secrets.mark_synced()
    auth = Authenticator(None, SecretKeys(secrets))
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(asleep("p", "m"))
        scaling, api, _, catalog = setup(cluster)
        api.on_scaled.append(engine_starts(cluster, engine.endpoint))
        async with running_gateway(
            cluster, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight, api_keys=auth
        ) as gw:
            body = {"model": "m", "messages": []}
            status, answer = await gw.post(CHAT, body, headers={"Authorization": "Bearer sk-viewer"})
            assert (status, answer["error"]["code"]) == (503, "model_sleeping")
            assert api.scaled == []
            assert gw.sample("llmaz_gateway_tenant_rejections_total", tenant="viewers", reason="may_wake") == 1
            status, _ = await gw.post(CHAT, body, headers={"Authorization": "Bearer sk-owner"})
            assert status == 200
            assert api.scaled == [("p", 1)]
