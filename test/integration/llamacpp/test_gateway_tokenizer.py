"""llmaz-gateway in front of a real llama.cpp `llama-server` (the tiny model): the tokenizer endpoints, a streamed
Responses API answer, a model's own entry, and embeddings and reranking from servers started for them, through the
gateway's real server over in-memory cluster objects (an OpenModel, a llama.cpp Playground and the EndpointSlice of
its `-lb` Service pointing at the server on loopback).

The server is started as test_llama_server.py starts it (`make llama-server` builds the binary).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from llmaz.apis import constants as c
from llmaz.gateway.proxy.metrics import GatewayMetrics
from llmaz.gateway.proxy.server import Gateway, GatewayOptions
from llmaz.gateway.routing.catalog import Catalog
from llmaz_dev import tinymodel
from llmaz_dev.testing.gateway_objects import endpoint_slice, open_model, playground
from llmaz_dev.testing.informer import FakeInformer

from .test_llama_server import _STOP_TIMEOUT, ALIAS, Server, _binary, _start

# Bounds every wait on the gateway; the server's own start is bounded by _start.
WAIT = 30.0
TEXT = "Hello world"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary = _binary()
    model = tinymodel.write_tiny_model(binary.parent / "vocab-llama-spm.gguf", tmp_path_factory.mktemp("m") / "t.gguf")
    started = _start(binary, model, tmp_path_factory.mktemp("logs") / "llama-server.log")
    yield started
    started.process.stop(_STOP_TIMEOUT)


def _informer(*objects: dict[str, Any]) -> FakeInformer:
    informer = FakeInformer()
    for obj in objects:
        informer.add(obj)
    informer.mark_synced()
    return informer


@pytest.fixture
async def gateway(llama: Server) -> AsyncIterator[str]:
    """The gateway's base URL, routing the model `ALIAS` to `llama` (a llama.cpp Playground)."""
    async with serving(llama) as url:
        yield url


@contextlib.asynccontextmanager
async def serving(llama: Server, *args: str) -> AsyncIterator[str]:
    """The gateway's base URL, routing the model `ALIAS` to `llama`, a llama.cpp Playground started with `args`."""
    port = urlsplit(llama.url).port
    assert port is not None
    pg = playground("pg", ALIAS)
    pg["spec"]["backendRuntimeConfig"] = {"backendName": c.LLAMACPP_BACKEND, "args": list(args)}
    catalog = Catalog(
        _informer(pg),
        _informer(),
        _informer(open_model(ALIAS)),
        [_informer(endpoint_slice("pg-lb-0", "pg-lb", port, ("127.0.0.1", True, False)))],
        _informer(),
    )
    gw = Gateway(catalog, GatewayOptions(bind_address="127.0.0.1:0"), metrics=GatewayMetrics(process_collectors=False))
    stopping = asyncio.Event()
    run = asyncio.create_task(gw.run(stopping))
    await asyncio.wait_for(gw.wait_serving(), WAIT)
    try:
        yield f"http://127.0.0.1:{gw.port}"
    finally:
        stopping.set()
        await asyncio.wait_for(run, WAIT)


async def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_text_tokenized_through_the_gateway_detokenizes_back_to_itself(gateway: str, llama: Server) -> None:
    status, tokenized = await _post(gateway + "/tokenize", {"model": ALIAS, "content": TEXT})
    assert status == 200, tokenized
    assert tokenized == (await _post(llama.url + "/tokenize", {"content": TEXT}))[1]  # the engine's own answer
    tokens = tokenized["tokens"]
    assert tokens
    assert all(isinstance(token, int) for token in tokens)
    status, detokenized = await _post(gateway + "/detokenize", {"model": ALIAS, "tokens": tokens})
    assert status == 200, detokenized
    assert detokenized["content"].strip() == TEXT


async def test_the_models_entry_says_what_llamacpp_serves_and_embeddings_are_refused(gateway: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:
        async with session.get(gateway + f"/v1/models/{ALIAS}") as resp:
            assert resp.status == 200
            entry = await resp.json()
        async with session.get(gateway + "/v1/models/other") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
    assert (entry["id"], entry["object"], entry["owned_by"]) == (ALIAS, "model", "llmaz")
    assert entry["capabilities"] == ["chat", "completion", "responses", "tokenize", "detokenize"]
    status, refused = await _post(gateway + "/v1/embeddings", {"model": ALIAS, "input": TEXT})
    assert status == 501  # llama-server runs without --embeddings: the gateway says so itself
    assert refused["error"]["code"] == "unsupported_endpoint"


async def test_a_streamed_response_arrives_through_the_gateway_as_server_sent_events(gateway: str) -> None:
    body = {"model": ALIAS, "input": "Say hello.", "max_output_tokens": 8, "stream": True}
    events: list[str] = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
        session.post(gateway + "/v1/responses", json=body) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for line in resp.content:
            if line.startswith(b"event:"):
                events.append(line.decode().split(":", 1)[1].strip())
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"
    assert "response.output_text.delta" in events


@pytest.mark.parametrize(
    ("flags", "path", "body", "capability"),
    [
        (("--embeddings", "--pooling", "mean"), "/v1/embeddings", {"input": [TEXT, "another text"]}, "embedding"),
        (("--reranking",), "/v1/rerank", {"query": TEXT, "documents": [TEXT, "unrelated words"]}, "rerank"),
    ],
    ids=["embeddings", "rerank"],
)
async def test_embeddings_and_reranking_through_the_gateway_are_the_engines_own_answers(
    tmp_path: Path, flags: tuple[str, ...], path: str, body: dict[str, Any], capability: str
) -> None:
    binary = _binary()
    model = tinymodel.write_tiny_model(binary.parent / "vocab-llama-spm.gguf", tmp_path / "t.gguf")
    llama = _start(binary, model, tmp_path / "llama-server.log", *flags)
    try:
        async with serving(llama, *flags) as gateway:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
                session.get(gateway + f"/v1/models/{ALIAS}") as resp,
            ):
                assert capability in (await resp.json())["capabilities"]
            status, through = await _post(gateway + path, {"model": ALIAS, **body})
            assert status == 200, through
            direct_status, direct = await _post(llama.url + path, {"model": ALIAS, **body})
            assert direct_status == 200, direct
            assert through == direct  # the same deterministic answer: relayed as the engine gave it
            assert len(through["data"] if capability == "embedding" else through["results"]) == 2
    finally:
        llama.process.stop(_STOP_TIMEOUT)
