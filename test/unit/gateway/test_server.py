"""The API over HTTP: listing models, routing outcomes, OpenAI-shaped refusals, metrics and a graceful stop."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway, GatewayOptions
from llmaz_dev.testing.waiting import eventually

from .support import (
    EVERY_CAPABILITY,
    FIRST_EVENT,
    LAST_EVENTS,
    VLLM_CAPABILITIES,
    WAIT,
    Cluster,
    endpoint_slice,
    engines,
    inference_service,
    open_model,
    playground,
    running_gateway,
)

CHAT = "/v1/chat/completions"


def is_openai_error(answer: object) -> bool:
    return (
        isinstance(answer, dict)
        and set(answer) == {"error"}
        and set(answer["error"]) == {"message", "type", "param", "code"}
    )


async def test_models_lists_every_served_model_once_in_openais_shape_with_what_it_serves() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("a", ownedBy="acme", createdAt="2024-01-01T00:00:00Z"))
    cluster.playgrounds.add(playground("p", "a"))
    cluster.services.add(inference_service("p", "a"))  # the Playground's own Service: the same model
    cluster.services.add(inference_service("s", "b", "draft"))
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models") as resp:
        assert resp.status == 200
        assert await resp.json() == {
            "object": "list",
            "data": [
                # a Playground of the default BackendRuntime, vLLM: what vLLM serves
                {"id": "a", "object": "model", "created": 1704067200, "owned_by": "acme"}
                | {"capabilities": VLLM_CAPABILITIES},
                # an inference Service alone: an engine not known, sent whatever is asked
                {"id": "b", "object": "model", "created": 0, "owned_by": "llmaz", "capabilities": EVERY_CAPABILITY},
            ],
        }


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"])
async def test_each_inference_path_routes_by_model_to_the_same_path_upstream(path: str) -> None:
    async with engines(2) as (a, b):
        cluster = Cluster().synced()
        cluster.serve("a", a.endpoint)
        cluster.serve("b", b.endpoint)
        async with running_gateway(cluster) as gw:
            assert (await gw.post(path, {"model": "b"}))[0] == 200
            assert (await gw.post(path, {}, headers={"x-ai-eg-model": "a"}))[0] == 200
            assert [r.path_qs for r in a.requests] == [path]
            assert [r.path_qs for r in b.requests] == [path]


async def test_an_unknown_model_is_404_model_not_found_listing_the_available_ones() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(playground("p", "llama"))
    async with running_gateway(cluster) as gw:
        status, answer = await gw.post(CHAT, {"model": "gpt-4"})
        assert status == 404
        assert answer["error"] == {
            "message": "The model `gpt-4` does not exist. Available models: llama.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }


async def test_a_model_without_a_ready_endpoint_is_503() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(playground("p", "m"))
    cluster.slices.add(endpoint_slice("p-lb-1", "p-lb", 8080, ("10.0.0.1", False, False)))
    async with running_gateway(cluster, GatewayOptions(hold_timeout=0.2)) as gw:  # held while it starts, briefly
        async with gw.session.post(gw.url + CHAT, data=b'{"model": "m"}') as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "5"
            assert (await resp.json())["error"]["code"] == "model_not_ready"
        assert gw.sample("llmaz_gateway_requests_total", model="m", code="503") == 1


async def test_before_the_caches_sync_every_request_is_503_not_a_wrong_answer() -> None:
    async with running_gateway(Cluster()) as gw:
        async with gw.session.get(gw.url + "/v1/models") as resp:
            assert resp.status == 503
        status, answer = await gw.post(CHAT, {"model": "m"})
        assert status == 503
        assert is_openai_error(answer)


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/", 404, "unknown_url"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("POST", "/v1/models", 405, "method_not_allowed"),
        ("HEAD", "/v1/models", 405, "method_not_allowed"),
        ("DELETE", "/v1/embeddings", 405, "method_not_allowed"),
        ("POST", "/v1/chat/completions/", 404, "unknown_url"),
        ("POST", "/v1/images/generations", 404, "unknown_url"),
    ],
)
async def test_unknown_paths_and_methods_get_openai_errors(method: str, path: str, status: int, code: str) -> None:
    async with running_gateway(Cluster().synced()) as gw, gw.session.request(method, gw.url + path) as resp:
        assert resp.status == status
        if method != "HEAD":
            answer = await resp.json()
            assert is_openai_error(answer)
            assert answer["error"]["code"] == code
        assert gw.sample("llmaz_gateway_requests_total", model="", code=str(status)) == 1


async def test_requests_are_counted_by_model_and_code_with_latency_and_in_flight_per_model() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            assert (await gw.post(CHAT, {"model": "other"}))[0] == 404
            assert (await gw.post(CHAT, b"{"))[0] == 400
            async with gw.session.post(gw.url + CHAT, data=b'{"model": "m", "stream": true}') as resp:
                await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT)
                assert gw.sample("llmaz_gateway_requests_in_flight", model="m") == 1
                engine.release.set()
                await resp.read()
            assert gw.sample("llmaz_gateway_requests_in_flight", model="m") == 0
            assert gw.sample("llmaz_gateway_requests_total", model="m", code="200") == 1
            assert gw.sample("llmaz_gateway_requests_total", model="", code="404") == 1
            assert gw.sample("llmaz_gateway_requests_total", model="", code="400") == 1
            assert gw.sample("llmaz_gateway_request_duration_seconds_count", model="m") == 1
            assert gw.sample("llmaz_gateway_time_to_first_byte_seconds_count", model="m") == 1
            engine.handler = None
            await gw.post(CHAT, {"model": "m"})
            assert gw.sample("llmaz_gateway_prompt_tokens_total", model="m") == 7 + 3
            assert gw.sample("llmaz_gateway_completion_tokens_total", model="m") == 11 + 5


async def test_stopping_refuses_new_connections_and_lets_an_in_flight_stream_finish() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        gateway = Gateway(
            cluster.catalog(),
            GatewayOptions(bind_address="127.0.0.1:0", drain_timeout=WAIT),
            metrics=GatewayMetrics(process_collectors=False),
        )
        stopping = asyncio.Event()
        run = asyncio.create_task(gateway.run(stopping))
        await asyncio.wait_for(gateway.wait_serving(), WAIT)
        url = f"http://127.0.0.1:{gateway.port}"
        async with aiohttp.ClientSession() as session, session.post(url + CHAT, data=b'{"model":"m"}') as resp:
            assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT) == FIRST_EVENT
            stopping.set()
            await eventually(lambda: not gateway.serving(), WAIT)
            with pytest.raises(aiohttp.ClientConnectionError):
                async with aiohttp.ClientSession() as fresh:
                    await fresh.get(url + "/v1/models")
            assert not run.done()
            engine.release.set()
            assert await asyncio.wait_for(resp.content.read(), WAIT) == LAST_EVENTS
        await asyncio.wait_for(run, WAIT)


async def test_requests_still_running_at_the_drain_deadline_are_cut_off() -> None:
    async with engines(1) as (engine,):
        engine.handler = engine.stream  # never released: the stream would run forever
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        gateway = Gateway(
            cluster.catalog(),
            GatewayOptions(bind_address="127.0.0.1:0", drain_timeout=0.2),
            metrics=GatewayMetrics(process_collectors=False),
        )
        stopping = asyncio.Event()
        run = asyncio.create_task(gateway.run(stopping))
        await asyncio.wait_for(gateway.wait_serving(), WAIT)
        url = f"http://127.0.0.1:{gateway.port}"
        async with aiohttp.ClientSession() as session, session.post(url + CHAT, data=b'{"model":"m"}') as resp:
            assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT) == FIRST_EVENT
            stopping.set()
            await asyncio.wait_for(run, WAIT)
            with pytest.raises(aiohttp.ClientPayloadError):
                await asyncio.wait_for(resp.content.read(), WAIT)
        await asyncio.wait_for(engine.cancelled.wait(), WAIT)
        sample = gateway.metrics.registry.get_sample_value
        assert sample("llmaz_gateway_requests_total", {"model": "m", "code": "499"}) == 1
