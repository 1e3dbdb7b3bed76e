"""The gateway gauges llmaz's alerts read (config/prometheus/alerts.yaml): requests held, each model's ready
endpoints and desired replicas, the age of each engine's metrics (the autoscaler's bounds: test_autoscaler.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from llmaz.gateway.proxy.metrics import ModelReadiness
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.signals import EngineSignals
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.waiting import eventually

from . import engine_pages as pages
from .support import (
    WAIT,
    Cluster,
    FakeEngine,
    endpoint_slice,
    engines,
    inference_service,
    open_model,
    playground,
    running_gateway,
)

CHAT = "/v1/chat/completions"
HELD = "llmaz_gateway_requests_held"
AGE = "llmaz_gateway_engine_metrics_age_seconds"


def with_replicas(obj: dict[str, Any], replicas: int) -> dict[str, Any]:
    obj["spec"]["replicas"] = replicas
    return obj


async def test_a_request_waiting_for_a_replica_is_counted_as_held_until_it_is_routed() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(playground("p", "m"))
        async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT)) as gw:
            assert gw.sample(HELD, model="m") == 0
            held = asyncio.create_task(gw.session.post(gw.url + CHAT, json={"model": "m", "messages": []}))
            await eventually(lambda: gw.sample(HELD, model="m") == 1, WAIT, "the request counted as held")
            cluster.slices.add(endpoint_slice("p-lb-0", "p-lb", engine.port, (engine.endpoint.address, True, False)))
            async with await asyncio.wait_for(held, WAIT) as resp:
                assert resp.status == 200
            assert gw.sample(HELD, model="m") == 0
            status, _ = await gw.post(CHAT, {"model": "m", "messages": []})  # a ready endpoint: never held
            assert status == 200
            assert gw.sample(HELD, model="m") == 0


def test_each_served_model_reports_its_ready_endpoints_and_the_replicas_asked_for_it() -> None:
    cluster = Cluster()
    registry = CollectorRegistry()
    ModelReadiness(cluster.catalog(), registry)
    cluster.playgrounds.add(with_replicas(playground("p", "starting"), 2))
    cluster.services.add(with_replicas(inference_service("p", "starting"), 1))  # its Service lags: the Playground wins
    ready, not_ready = ("10.0.0.1", True, False), ("10.0.0.2", False, False)
    cluster.slices.add(endpoint_slice("p-lb-0", "p-lb", 8080, ready, not_ready))
    cluster.playgrounds.add(with_replicas(playground("asleep", "sleeper"), 0))
    cluster.services.add(inference_service("bare", "unclaimed"))  # no Playground; replicas unset: 1
    assert registry.get_sample_value("llmaz_gateway_model_ready_endpoints", {"model": "starting"}) is None
    cluster.synced()

    def sample(name: str, model: str) -> float | None:
        return registry.get_sample_value(f"llmaz_gateway_model_{name}", {"model": model})

    assert (sample("ready_endpoints", "starting"), sample("desired_replicas", "starting")) == (1, 2)
    assert (sample("ready_endpoints", "sleeper"), sample("desired_replicas", "sleeper")) == (0, 0)
    assert (sample("ready_endpoints", "unclaimed"), sample("desired_replicas", "unclaimed")) == (0, 1)
    cluster.playgrounds.add(with_replicas(playground("q", "starting"), 3))  # pooled in its namespace: 2 + 3
    assert sample("desired_replicas", "starting") == 5
    cluster.playgrounds.add(with_replicas(playground("r", "starting", namespace="other"), 4))  # not routed to
    assert sample("desired_replicas", "starting") == 5
    cluster.services.delete(inference_service("bare", "unclaimed"))
    assert sample("desired_replicas", "unclaimed") is None


def serve(engine: FakeEngine, page: str | None) -> None:
    """`engine` answers /metrics with `page`, or 500 without one."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if page is None:
            return web.Response(status=500)
        return web.Response(text=page, content_type="text/plain")

    engine.handler = handle


async def test_the_age_of_an_engines_metrics_grows_from_its_last_good_read_and_only_for_engines_once_read() -> None:
    cluster, clock, registry = Cluster().synced(), FakeClock(), CollectorRegistry()
    signals = EngineSignals(cluster.catalog(), timeout=WAIT, clock=clock, registry=registry)
    try:
        async with engines(3) as (steady, failing, without_metrics):
            serve(steady, pages.tgi(1, 0))
            serve(failing, pages.tgi(2, 0))
            without_metrics.handler = without_metrics.unavailable  # never recognised, like Ollama

            def age(engine: FakeEngine) -> float | None:
                return registry.get_sample_value(AGE, {"endpoint": str(engine.endpoint), "engine": "tgi"})

            cluster.serve("m", steady.endpoint, failing.endpoint, without_metrics.endpoint)
            await signals.scrape()
            assert (age(steady), age(failing)) == (0, 0)
            reported = {s.labels["endpoint"] for f in registry.collect() if f.name == AGE for s in f.samples}
            assert reported == {str(steady.endpoint), str(failing.endpoint)}

            serve(failing, None)
            clock.step(30)
            await signals.scrape()
            assert (age(steady), age(failing)) == (0, 30)
            clock.step(15)
            assert age(failing) == 45  # read at each scrape of the gateway, not only after a cycle

            cluster.slices.delete(endpoint_slice("pg-m-lb-1", "pg-m-lb", failing.port, ("127.0.0.1", True, False)))
            await signals.scrape()
            assert age(failing) is None
            assert age(steady) == 0
    finally:
        await signals.close()
