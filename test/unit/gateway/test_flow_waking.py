"""Flow control and requests held while a model gets a replica: they wait in the model's flow queue (its band, its
tenant) rather than a hold of their own, leave it in band order once endpoints come, and are bounded by the longer
of the queue's TTL and the hold's bound. Without flow control the hold is unchanged (`test_holding`)."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmaz.gateway.flow.control import FlowOptions
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, RunningGateway, engines, open_model, running_gateway
from .test_flow_gateway import DEPTH, PRIORITY, SHED, Signals, queued, tagged, tags
from .test_holding import held_in_flight, ready_slice, restarting
from .test_waker import asleep, engine_starts, setup

CHAT = "/v1/chat/completions"
WAITED = "llmaz_gateway_flow_wait_seconds_count"


def starting_cluster() -> Cluster:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(restarting())
    return cluster


async def test_requests_held_while_replicas_start_wait_in_the_flow_queue_and_leave_it_by_band() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=2, waiting=3)  # once it is ready: room for one
        cluster = starting_cluster()
        options = GatewayOptions(hold_timeout=WAIT, flow=FlowOptions(enabled=True))
        async with running_gateway(cluster, options, signals=signals) as gw:
            low = asyncio.create_task(gw.post(CHAT, tagged("low"), headers={PRIORITY: "1"}))
            await eventually_queued(gw, 1)
            high = asyncio.create_task(gw.post(CHAT, tagged("high"), headers={PRIORITY: "8"}))
            await eventually_queued(gw, 2)
            assert gw.sample(DEPTH, model="m", band="1", tenant="") == 1
            assert gw.sample(DEPTH, model="m", band="8", tenant="") == 1
            assert gw.sample("llmaz_gateway_requests_held", model="m") == 2
            cluster.slices.add(ready_slice(engine))
            assert (await asyncio.wait_for(high, WAIT))[0] == 200
            assert (await asyncio.wait_for(low, WAIT))[0] == 200
            assert tags(engine) == ["high", "low"]
            assert gw.sample(WAITED, model="m", band="8") == 1
            assert gw.sample(WAITED, model="m", band="1") == 1
            assert gw.sample(DEPTH, model="m", band="1", tenant="") == 0


async def eventually_queued(gw: RunningGateway, count: int) -> None:
    await eventually(lambda: queued(gw) == count, WAIT, f"{count} request(s) in the flow queue")


@pytest.mark.parametrize(("hold_timeout", "queue_ttl"), [(50.0, 5.0), (5.0, 50.0)], ids=["hold-longer", "ttl-longer"])
async def test_a_request_held_while_replicas_start_waits_up_to_the_longer_of_the_hold_and_the_queue_ttl(
    hold_timeout: float, queue_ttl: float
) -> None:
    cluster = starting_cluster()
    options = GatewayOptions(hold_timeout=hold_timeout, flow=FlowOptions(enabled=True, queue_ttl=queue_ttl))
    async with running_gateway(cluster, options) as gw:
        started = time.monotonic()
        held = asyncio.create_task(gw.post(CHAT, tagged("held")))
        await eventually_queued(gw, 1)
        assert gw.gateway.flow is not None
        (waiter,) = gw.gateway.flow.queued("m")
        assert started + 50 - 1 <= waiter.deadline <= time.monotonic() + 50
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)


async def test_a_request_whose_replica_does_not_come_within_the_bound_is_answered_as_without_flow_control() -> None:
    cluster = starting_cluster()
    options = GatewayOptions(hold_timeout=0.3, flow=FlowOptions(enabled=True, queue_ttl=0.1))
    async with running_gateway(cluster, options) as gw:
        started = time.monotonic()
        async with gw.session.post(gw.url + CHAT, json=tagged("late")) as resp:
            assert resp.status == 503
            answer = await resp.json()
        assert time.monotonic() - started >= 0.3
        assert answer["error"]["code"] == "model_not_ready"
        assert answer["error"]["message"] == (
            "The model `m` is starting but had no ready endpoint within 0 s. Retry later."
        )
        assert gw.sample(SHED, model="m", tenant="", band="5", reason="no_endpoint") == 1


async def test_a_request_waiting_in_the_queue_for_a_replica_is_a_404_at_once_when_its_playground_goes() -> None:
    cluster = starting_cluster()
    options = GatewayOptions(hold_timeout=WAIT, flow=FlowOptions(enabled=True))
    async with running_gateway(cluster, options) as gw:
        held = asyncio.create_task(gw.session.post(gw.url + CHAT, json=tagged("held")))
        await held_in_flight(gw, "m")
        await eventually_queued(gw, 1)
        cluster.playgrounds.delete(restarting())
        async with await asyncio.wait_for(held, WAIT / 2) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
        assert queued(gw) == 0


async def test_requests_that_wake_a_model_wait_in_its_flow_queue_and_are_all_answered() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(asleep("p", "m"))
        scaling, api, _, catalog = setup(cluster)
        api.on_scaled.append(engine_starts(cluster, engine.endpoint))
        options = GatewayOptions(flow=FlowOptions(enabled=True))
        async with running_gateway(
            cluster, options, catalog=catalog, waker=scaling.waker, in_flight=scaling.in_flight
        ) as gw:
            answers = await asyncio.gather(*(gw.post(CHAT, tagged(str(i))) for i in range(10)))
            assert [status for status, _ in answers] == [200] * 10
            assert api.scaled == [("p", 1)]
            assert gw.sample(WAITED, model="m", band="5") == 10
            assert gw.sample("llmaz_gateway_flow_wait_seconds_sum", model="m", band="5") > 0


async def test_a_request_waiting_for_a_replica_whose_client_goes_away_leaves_the_queue_and_is_never_sent() -> None:
    async with engines(1) as (engine,):
        cluster = starting_cluster()
        options = GatewayOptions(hold_timeout=WAIT, flow=FlowOptions(enabled=True))
        async with running_gateway(cluster, options) as gw:
            gone = asyncio.create_task(gw.post(CHAT, tagged("gone")))
            await eventually_queued(gw, 1)
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            await eventually(lambda: queued(gw) == 0, WAIT, "the request left the queue")
            await eventually(lambda: gw.gateway.in_flight.of_model("m") == 0, WAIT, "the request ended")
            assert gw.sample(DEPTH, model="m", band="5", tenant="") == 0
            assert gw.sample("llmaz_gateway_requests_held", model="m") == 0
            cluster.slices.add(ready_slice(engine))
            status, _ = await gw.post(CHAT, tagged("next"))
            assert status == 200
            assert tags(engine) == ["next"]
