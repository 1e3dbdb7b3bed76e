"""Flow control through a running gateway: a model that is not saturated is never held; a saturated one's requests
wait, the higher band first, and its queue sheds with 429 past its size. The engines' load is set by the test."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from llmaz.gateway.flow.control import FlowOptions
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.load import EngineLoad
from llmaz.gateway.routing.routes import Endpoint
from llmaz_dev.testing.waiting import eventually

from .support import WAIT, Cluster, FakeEngine, RunningGateway, engines, running_gateway, secret
from .test_keys import authenticator

CHAT = "/v1/chat/completions"
PRIORITY = "x-llmaz-priority"
DEPTH = "llmaz_gateway_flow_queue_depth"
SHED = "llmaz_gateway_flow_shed_requests_total"
FLOW_ON = GatewayOptions(flow=FlowOptions(enabled=True))


class Signals:
    """The engines' load as the test sets it."""

    def __init__(self) -> None:
        self.loads: dict[Endpoint, EngineLoad] = {}

    def load(self, endpoint: Endpoint) -> EngineLoad | None:
        return self.loads.get(endpoint)

    def set(self, endpoint: Endpoint, running: int, waiting: int) -> None:
        """The engine read now (`observed_at`): what the gateway sends it from now on counts on top."""
        self.loads[endpoint] = EngineLoad(running=running, waiting=waiting, observed_at=time.monotonic())


def tagged(tag: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": tag}]}


def tags(engine: FakeEngine) -> list[str]:
    return [orjson.loads(seen.body)["messages"][0]["content"] for seen in engine.requests]


def queued(gw: RunningGateway) -> int:
    assert gw.gateway.flow is not None
    return len(gw.gateway.flow.queued("m"))


async def test_a_model_that_is_not_saturated_is_never_held() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        signals.set(engine.endpoint, running=40, waiting=0)
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, FLOW_ON, signals=signals) as gw:
            calls = [asyncio.create_task(gw.session.post(gw.url + CHAT, json=tagged(str(i)))) for i in range(6)]
            await eventually(lambda: len(engine.requests) == 6, WAIT, "every request sent to the engine at once")
            assert queued(gw) == 0
            engine.release.set()
            for call in calls:
                async with await call as resp:
                    assert resp.status == 200
            assert gw.sample("llmaz_gateway_flow_wait_seconds_count", model="m", band="5") == 6
            assert gw.sample("llmaz_gateway_flow_wait_seconds_sum", model="m", band="5") == 0


async def test_a_saturated_models_higher_band_is_served_first() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=8, waiting=4)  # at capacity, its queue at the threshold: full
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, FLOW_ON, signals=signals) as gw:
            low = asyncio.create_task(gw.post(CHAT, tagged("low"), headers={PRIORITY: "1"}))
            await eventually(lambda: queued(gw) == 1, WAIT, "the low-priority request queued")
            high = asyncio.create_task(gw.post(CHAT, tagged("high"), headers={PRIORITY: "8"}))
            await eventually(lambda: queued(gw) == 2, WAIT, "the high-priority request queued")
            assert engine.requests == []
            assert gw.sample(DEPTH, model="m", band="1", tenant="") == 1
            assert gw.sample(DEPTH, model="m", band="8", tenant="") == 1
            signals.set(engine.endpoint, running=8, waiting=3)  # room for one: the next waits for it to end
            assert gw.gateway.flow is not None
            gw.gateway.flow.refresh()
            assert (await high)[0] == 200
            assert (await low)[0] == 200
            assert tags(engine) == ["high", "low"]
            assert gw.sample(DEPTH, model="m", band="1", tenant="") == 0


async def test_a_keys_priority_is_its_band_and_the_header_cannot_raise_it() -> None:
    auth, _ = authenticator(
        secret("batch", key="sk-batch", tenant="batch", priority="2"),
        secret("chat", key="sk-chat", tenant="chat", priority="7"),
    )
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=8, waiting=4)
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, FLOW_ON, api_keys=auth, signals=signals) as gw:
            batch = {"Authorization": "Bearer sk-batch", PRIORITY: "9"}
            low = asyncio.create_task(gw.post(CHAT, tagged("batch"), headers=batch))
            await eventually(lambda: queued(gw) == 1, WAIT, "the batch request queued")
            high = asyncio.create_task(gw.post(CHAT, tagged("chat"), headers={"Authorization": "Bearer sk-chat"}))
            await eventually(lambda: queued(gw) == 2, WAIT, "the chat request queued")
            assert gw.sample(DEPTH, model="m", band="2", tenant="batch") == 1
            assert gw.sample(DEPTH, model="m", band="7", tenant="chat") == 1
            signals.set(engine.endpoint, running=8, waiting=3)
            assert gw.gateway.flow is not None
            gw.gateway.flow.refresh()
            assert (await high)[0] == 200
            assert (await low)[0] == 200
            assert tags(engine) == ["chat", "batch"]


async def test_a_saturated_models_queue_sheds_with_429_past_its_size() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=8, waiting=4)
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        options = GatewayOptions(flow=FlowOptions(enabled=True, queue_size=2))
        async with running_gateway(cluster, options, signals=signals) as gw:
            waiting = [asyncio.create_task(gw.post(CHAT, tagged(f"w{i}"), headers={PRIORITY: "5"})) for i in range(2)]
            await eventually(lambda: queued(gw) == 2, WAIT, "two requests queued")
            async with gw.session.post(gw.url + CHAT, json=tagged("shed"), headers={PRIORITY: "3"}) as resp:
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "5"
                error = (await resp.json())["error"]
            assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
            assert "saturated" in error["message"]
            assert gw.sample(SHED, model="m", tenant="", band="3", reason="queue_full") == 1
            assert gw.sample("llmaz_gateway_requests_total", model="m", code="429") == 1
            signals.set(engine.endpoint, running=8, waiting=0)
            assert gw.gateway.flow is not None
            gw.gateway.flow.refresh()
            assert [(await w)[0] for w in waiting] == [200, 200]
            assert sorted(tags(engine)) == ["w0", "w1"]


async def test_a_queued_request_whose_client_goes_away_is_removed_and_never_sent() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=8, waiting=4)
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, FLOW_ON, signals=signals) as gw:
            gone = asyncio.create_task(gw.post(CHAT, tagged("gone")))
            await eventually(lambda: queued(gw) == 1, WAIT, "the request queued")
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            await eventually(lambda: queued(gw) == 0, WAIT, "the request left the queue")
            assert gw.sample(DEPTH, model="m", band="5", tenant="") == 0
            signals.set(engine.endpoint, running=8, waiting=0)
            status, _ = await gw.post(CHAT, tagged("next"))
            assert status == 200
            assert tags(engine) == ["next"]


async def test_a_request_that_waits_the_queues_ttl_gets_429() -> None:
    signals = Signals()
    async with engines(1) as (engine,):
        signals.set(engine.endpoint, running=8, waiting=4)
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        options = GatewayOptions(flow=FlowOptions(enabled=True, queue_ttl=0.2))
        async with running_gateway(cluster, options, signals=signals) as gw:
            status, answer = await gw.post(CHAT, tagged("late"))
            assert status == 429
            assert answer["error"]["code"] == "rate_limit_exceeded"
            assert engine.requests == []
            assert gw.sample(SHED, model="m", tenant="", band="5", reason="queue_ttl") == 1


async def test_a_priority_header_that_is_not_a_band_is_refused_400_naming_it() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster, FLOW_ON) as gw:
            for value in ("10", "urgent"):
                status, answer = await gw.post(CHAT, tagged("x"), headers={PRIORITY: value})
                assert status == 400
                error = answer["error"]
                assert (error["type"], error["code"], error["param"]) == (
                    "invalid_request_error",
                    "invalid_priority",
                    PRIORITY,
                )
                assert "an integer from 0 to 9" in error["message"]
            assert engine.requests == []
