"""LoRA adapters through a running gateway: the engines' listings read by the engine signals, requests routed only
to the replicas that hold their adapter, the body each engine gets, and the refusals."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web
from structlog.testing import capture_logs

from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.routing.adapters import Adapter, LoraSlots, ServedAdapters
from llmaz.gateway.routing.signals import STALE_AFTER_FAILURES
from llmaz_dev.testing.clock import FakeClock
from llmaz_dev.testing.waiting import eventually

from . import engine_pages as pages
from .support import (
    LEAST_OUTSTANDING_GATEWAY,
    LLAMACPP_CAPABILITIES,
    VLLM_CAPABILITIES,
    WAIT,
    Cluster,
    FakeEngine,
    endpoint_slice,
    engines,
    inference_service,
    open_model,
    playground,
    running_gateway,
    scraping,
)

CHAT = "/v1/chat/completions"
HUB = {"modelHub": {"modelID": "x/lora"}}
SQL = Adapter("sql", "m", 0, 0.5)


def llamacpp(engine: FakeEngine, *paths: str, listing_status: int = 200) -> None:
    """The engine answers as llama.cpp started with one `--lora` per path (in order), and chats with `ok`, or with
    `stream` (held until `release`) when `engine.release` is to be waited on."""
    chat = engine.handler if engine.handler is not None else engine.ok

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/metrics":
            return web.Response(text=pages.llamacpp(0, 0))
        if request.path == "/props":
            return web.Response(body=pages.llamacpp_props(2), content_type="application/json")
        if request.path == "/lora-adapters":
            listed = [{"id": i, "path": p, "scale": 0.0} for i, p in enumerate(paths)]
            return web.json_response(listed, status=listing_status)
        return await chat(request)

    engine.handler = handle


def vllm(engine: FakeEngine, *adapters: str) -> None:
    """The engine answers as vLLM serving model `m` with `--lora-modules` for `adapters`."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path == "/metrics":
            return web.Response(text=pages.vllm((0,), (0,), (0.1,)))
        if request.path == "/v1/models":
            cards = [{"id": "m", "object": "model", "root": "/workspace/models/m", "parent": None}]
            cards += [{"id": a, "object": "model", "root": f"/adapters--{a}", "parent": "m"} for a in adapters]
            return web.json_response({"object": "list", "data": cards})
        return await engine.ok(request)

    engine.handler = handle


def serve_with_adapters(cluster: Cluster, *engines_: FakeEngine, backend: str = "llamacpp") -> None:
    """Model `m` with adapters `sql` (scale 0.5) and `chat`, served by Playground `p` on `backend` at `engines_`."""
    adapters = [{"name": "sql", "source": HUB, "scale": 0.5}, {"name": "chat", "source": HUB}]
    cluster.open_models.add(open_model("m", ownedBy="acme", adapters=adapters))
    pg = playground("p", "m")
    pg["spec"]["backendRuntimeConfig"] = {"backendName": backend}
    cluster.playgrounds.add(pg)
    for i, engine in enumerate(engines_):
        cluster.slices.add(endpoint_slice(f"p-lb-{i}", "p-lb", engine.port, ("127.0.0.1", True, False)))


def chats(engine: FakeEngine) -> list[dict[str, Any]]:
    return [orjson.loads(seen.body) for seen in engine.requests if seen.path_qs == CHAT]


def listings(engine: FakeEngine) -> int:
    return sum(1 for seen in engine.requests if seen.path_qs in ("/lora-adapters", "/v1/models"))


# --- listing -----------------------------------------------------------------------------------------------------


async def test_models_lists_each_adapter_after_its_base_model_with_parent() -> None:
    cluster = Cluster().synced()
    serve_with_adapters(cluster)
    cluster.open_models.add(open_model("z"))
    cluster.playgrounds.add(playground("pz", "z"))
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models") as resp:
        assert resp.status == 200
        card = {"object": "model", "created": 1714521600, "owned_by": "acme", "capabilities": LLAMACPP_CAPABILITIES}
        assert (await resp.json())["data"] == [
            {"id": "m", **card},
            {"id": "sql", **card, "parent": "m"},
            {"id": "chat", **card, "parent": "m"},
            {"id": "z", **card, "owned_by": "llmaz", "capabilities": VLLM_CAPABILITIES},
        ]


# --- the engine signals read the listings --------------------------------------------------------------------------


async def test_listings_are_read_on_first_sight_then_every_interval_and_only_for_models_with_adapters() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(3) as (llama, served, plain), scraping(cluster, clock=clock) as signals:
        llamacpp(llama, "/workspace/models/adapters--sql/a.gguf")
        vllm(served, "sql")
        llamacpp(plain)
        serve_with_adapters(cluster, llama, served)
        cluster.open_models.add(open_model("other"))
        cluster.serve("other", plain.endpoint)
        await signals.scrape()
        assert signals.adapters(llama.endpoint) == LoraSlots(((0, "/workspace/models/adapters--sql/a.gguf"),))
        assert signals.adapters(served.endpoint) == ServedAdapters(frozenset({"sql"}))
        assert signals.adapters(plain.endpoint) is None
        assert listings(plain) == 0
        await signals.scrape()
        clock.step(9.9)
        await signals.scrape()
        assert (listings(llama), listings(served)) == (1, 1)
        clock.step(0.1)
        await signals.scrape()
        assert (listings(llama), listings(served)) == (2, 2)
        clock.step(29.9)  # no read for 3 intervals: no longer known
        assert signals.adapters(llama.endpoint) is not None
        clock.step(0.1)
        assert signals.adapters(llama.endpoint) is None


async def test_a_failed_listing_is_unknown_at_once_and_logged_once_each_way() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (llama,), scraping(cluster, clock=clock) as signals:
        llamacpp(llama, "/a.gguf")
        serve_with_adapters(cluster, llama)
        await signals.scrape()
        assert signals.adapters(llama.endpoint) is not None
        llamacpp(llama, listing_status=500)
        with capture_logs() as logs:
            for _ in range(2):
                clock.step(10)
                await signals.scrape()
            assert signals.adapters(llama.endpoint) is None
            llamacpp(llama, "/a.gguf")
            clock.step(10)
            await signals.scrape()
        assert signals.adapters(llama.endpoint) == LoraSlots(((0, "/a.gguf"),))
        assert [(log["event"], log.get("reason")) for log in logs if "adapters" in log["event"]] == [
            ("engine adapters unknown: listing failed", "HTTP 500 from /lora-adapters"),
            ("engine adapters known again", None),
        ]


async def test_an_engine_back_from_a_failed_load_read_is_listed_again_at_once() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(1) as (llama,), scraping(cluster, clock=clock) as signals:
        llamacpp(llama, "/a.gguf")
        serve_with_adapters(cluster, llama)
        await signals.scrape()
        healthy = llama.handler

        async def restarting(request: web.Request) -> web.StreamResponse:
            return web.Response(status=503)

        llama.handler = restarting
        await signals.scrape()
        assert signals.adapters(llama.endpoint) is not None  # one failed read keeps what is known
        for _ in range(STALE_AFTER_FAILURES - 1):
            await signals.scrape()
        assert signals.adapters(llama.endpoint) is None  # its load reads failed: it may be another engine now
        llama.handler = healthy
        llamacpp(llama, "/a.gguf", "/b.gguf")
        await signals.scrape()  # well within the interval
        assert signals.adapters(llama.endpoint) == LoraSlots(((0, "/a.gguf"), (1, "/b.gguf")))


# --- routing -----------------------------------------------------------------------------------------------------


async def test_a_request_for_an_adapter_goes_only_to_the_llamacpp_replica_holding_it_with_its_lora() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (holder, old), scraping(cluster) as signals:
        llamacpp(holder, "/workspace/models/adapters--chat/c.gguf", "/workspace/models/adapters--sql/s.gguf")
        llamacpp(old)  # started before the adapters were added
        serve_with_adapters(cluster, holder, old)
        await signals.scrape()
        async with running_gateway(cluster, adapters=signals) as gw:
            for _ in range(6):
                request = {"model": "sql", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
                status, answer = await gw.post(CHAT, request)
                assert status == 200
                assert answer["model"] == "sql"
            assert chats(old) == []
            # Its own ids, not spec order; the adapter at its scale, the other at 0.
            lora = [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.5}]
            assert chats(holder) == [{**request, "lora": lora}] * 6
            assert gw.sample("llmaz_gateway_requests_total", model="sql", code="200") == 6
            assert gw.gateway.in_flight.of_model("m") == 0


async def test_vllm_gets_the_adapters_name_unchanged_and_only_where_it_serves_it() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (holder, other), scraping(cluster) as signals:
        vllm(holder, "sql", "chat")
        vllm(other, "chat")
        serve_with_adapters(cluster, holder, other, backend="vllm")
        await signals.scrape()
        async with running_gateway(cluster, adapters=signals) as gw:
            body = b'{"model": "sql", "prompt": "SELECT"}'
            for _ in range(4):
                assert (await gw.post("/v1/completions", body))[0] == 200
            assert [seen.body for seen in holder.requests if seen.path_qs == "/v1/completions"] == [body] * 4
            assert [seen for seen in other.requests if seen.path_qs == "/v1/completions"] == []


async def test_without_listings_every_replica_is_a_holder_and_the_playgrounds_engine_decides_the_body() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (a, b):
        for engine in (a, b):
            engine.handler = engine.stream  # each request stays in flight until released
        serve_with_adapters(cluster, a, b)
        async with running_gateway(cluster) as gw:
            first = await gw.session.post(gw.url + CHAT, json={"model": "chat", "stream": True})
            await eventually(lambda: len(chats(a)) + len(chats(b)) == 1, WAIT, "the first request at an engine")
            # Least outstanding: the second goes to the other replica, which holds the adapter as far as is known.
            second = await gw.session.post(gw.url + CHAT, json={"model": "chat", "stream": True})
            await eventually(lambda: len(chats(a)) == len(chats(b)) == 1, WAIT, "one request at each engine")
            a.release.set()
            b.release.set()
            for resp in (first, second):
                assert resp.status == 200
                await resp.read()
                resp.release()
            lora = [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 1.0}]
            assert chats(a) == chats(b) == [{"model": "chat", "stream": True, "lora": lora}]


async def test_the_base_models_requests_to_llamacpp_set_every_adapter_to_zero() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (holder, old), scraping(cluster) as signals:
        llamacpp(holder, "/workspace/models/adapters--chat/c.gguf", "/workspace/models/adapters--sql/s.gguf")
        llamacpp(old)  # started before the adapters were added: sent the body as it came
        serve_with_adapters(cluster, holder, old)
        await signals.scrape()
        async with running_gateway(cluster, LEAST_OUTSTANDING_GATEWAY, adapters=signals) as gw:
            request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            for _ in range(64):  # idle replicas tie and are picked at random: until each has had one
                assert (await gw.post(CHAT, request))[0] == 200
                if chats(holder) and chats(old):
                    break
            zeros = [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]
            assert chats(holder)
            assert chats(old)
            assert chats(holder) == [{**request, "lora": zeros}] * len(chats(holder))
            assert chats(old) == [request] * len(chats(old))


async def test_an_unknown_adapter_is_404_listing_models_and_adapters() -> None:
    cluster = Cluster().synced()
    serve_with_adapters(cluster)
    async with running_gateway(cluster) as gw:
        status, answer = await gw.post(CHAT, {"model": "sqll"})
        assert status == 404
        assert answer["error"]["code"] == "model_not_found"
        assert answer["error"]["message"] == "The model `sqll` does not exist. Available models: chat, m, sql."


async def test_an_adapter_no_ready_replica_holds_is_held_then_503_model_not_ready() -> None:
    cluster = Cluster().synced()
    async with engines(2) as (a, b), scraping(cluster) as signals:
        llamacpp(a)
        llamacpp(b)
        serve_with_adapters(cluster, a, b)
        await signals.scrape()
        async with running_gateway(cluster, GatewayOptions(hold_timeout=0.3), adapters=signals) as gw:
            started = time.monotonic()
            async with gw.session.post(gw.url + CHAT, json={"model": "sql"}) as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"] == "5"
                answer = await resp.json()
            assert time.monotonic() - started >= 0.3
            assert answer["error"]["code"] == "model_not_ready"
            assert answer["error"]["message"] == (
                "The model `sql` is starting but had no ready endpoint within 0 s. Retry later."
            )
            assert (await gw.post(CHAT, {"model": "m"}))[0] == 200  # the base model keeps serving
            assert chats(a) + chats(b) == [{"model": "m"}]


async def test_an_adapter_its_service_left_out_is_503_at_once_its_why_logged_and_the_rest_serves() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,), scraping(cluster) as signals:
        llamacpp(engine, "/workspace/models/adapters--chat/chat.gguf")
        serve_with_adapters(cluster, engine)
        why = "ModelLoaderFailed: pod p-0, init container model-loader-adapter-0 (adapter sql) exited with code 3"
        left_out = [{"name": "sql", "source": HUB, "reason": "ModelLoaderFailed", "message": why}]
        cluster.services.add({**inference_service("p", "m"), "status": {"unavailableAdapters": left_out}})
        await signals.scrape()
        async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT), adapters=signals) as gw:
            started = time.monotonic()
            with capture_logs() as logs:
                status, answer = await gw.post(CHAT, {"model": "sql"})
            assert (status, answer["error"]["code"]) == (503, "model_not_ready")
            assert time.monotonic() - started < WAIT  # not held: no replica will ever hold it
            assert answer["error"]["message"] == (
                "The model `sql` has no ready endpoint, and none is coming (adapter unavailable)."
            )
            assert [log["detail"] for log in logs if log["event"] == "request"] == [
                f"adapter sql is left out of model m: {why}"
            ]
            assert (await gw.post(CHAT, {"model": "chat"}))[0] == 200
            assert (await gw.post(CHAT, {"model": "m"}))[0] == 200
            assert [body["lora"] for body in chats(engine)] == [[{"id": 0, "scale": 1.0}], [{"id": 0, "scale": 0.0}]]


async def test_before_its_listing_is_read_a_replica_is_sent_the_ids_of_the_adapters_its_service_loaded() -> None:
    cluster = Cluster().synced()
    async with engines(1) as (engine,):
        serve_with_adapters(cluster, engine)  # sql (spec.adapters[0]) and chat ([1])
        left_out = [{"name": "sql", "source": HUB, "reason": "ModelLoaderFailed", "message": "exited with code 3"}]
        cluster.services.add({**inference_service("p", "m"), "status": {"unavailableAdapters": left_out}})
        async with running_gateway(cluster) as gw:  # no engine signals: no listing read yet
            assert (await gw.post(CHAT, {"model": "chat"}))[0] == 200
            assert (await gw.post(CHAT, {"model": "m"}))[0] == 200
        # The replica loaded chat alone, as llama.cpp's adapter 0: never sent sql's position for it.
        assert [body["lora"] for body in chats(engine)] == [[{"id": 0, "scale": 1.0}], [{"id": 0, "scale": 0.0}]]


async def test_a_held_adapter_request_goes_to_the_replica_that_lists_it_once_it_does() -> None:
    cluster, clock = Cluster().synced(), FakeClock()
    async with engines(2) as (old, new), scraping(cluster, clock=clock) as signals:
        llamacpp(old)
        llamacpp(new)
        serve_with_adapters(cluster, old, new)
        await signals.scrape()
        options = GatewayOptions(hold_timeout=10 * WAIT)
        async with running_gateway(cluster, options, catalog=signals.catalog, adapters=signals) as gw:
            held = asyncio.create_task(gw.post(CHAT, {"model": "sql"}))
            await eventually(lambda: gw.gateway.in_flight.of_model("m") == 1, WAIT, "the request held")
            llamacpp(new, "/workspace/models/adapters--sql/s.gguf")  # the rollout's new replica
            clock.step(signals.adapters_interval)
            await signals.scrape()
            assert (await asyncio.wait_for(held, WAIT))[0] == 200
            assert chats(new) == [{"model": "sql", "lora": [{"id": 0, "scale": 0.5}]}]
            assert chats(old) == []
