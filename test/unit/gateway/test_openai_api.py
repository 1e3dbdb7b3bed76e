"""OpenAI's API beyond chat: a model's own entry, the endpoints each engine serves (forwarded, at the engine's own
path) and those it does not (501 at once), streaming of the Responses API, and audio uploads routed by their form."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from llmaz.gateway.proxy.auth import ApiKeys
from llmaz.gateway.proxy.server import GatewayOptions

from .support import (
    EVERY_CAPABILITY,
    LLAMACPP_CAPABILITIES,
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
from .test_server import is_openai_error

RESPONSE_CREATED = b'event: response.created\ndata: {"type": "response.created", "response": {"usage": null}}\n\n'
RESPONSE_COMPLETED = (
    b"event: response.completed\n"
    b'data: {"type": "response.completed", "response": {"status": "completed",'
    b' "usage": {"input_tokens": 13, "output_tokens": 21, "total_tokens": 34}}}\n\n'
)


async def answer_json(request: web.Request) -> web.StreamResponse:
    return web.json_response({"answered": request.path})


def served(cluster: Cluster, model: str, backend: str, *args: str) -> None:
    """`model` served by a Playground on `backend` started with `args`, without an endpoint."""
    cluster.open_models.add(open_model(model))
    pg = playground(f"pg-{model}", model)
    pg["spec"]["backendRuntimeConfig"] = {"backendName": backend, "args": list(args)}
    cluster.playgrounds.add(pg)


# --- GET /v1/models/{id} ------------------------------------------------------------------------------------------


async def test_a_models_own_entry_is_its_line_of_the_list() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m", ownedBy="acme", createdAt="2024-01-01T00:00:00Z"))
    cluster.playgrounds.add(playground("p", "m"))
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models/m") as resp:
        assert resp.status == 200
        assert await resp.json() == {
            "id": "m",
            "object": "model",
            "created": 1704067200,
            "owned_by": "acme",
            "capabilities": VLLM_CAPABILITIES,
        }
        assert gw.sample("llmaz_gateway_requests_total", model="m", code="200") == 1


async def test_an_adapters_own_entry_names_its_parent_and_says_what_its_base_model_serves() -> None:
    cluster = Cluster().synced()
    hub = {"modelHub": {"modelID": "org/sql-lora"}}
    cluster.open_models.add(open_model("m", adapters=[{"name": "sql", "source": hub}]))
    pg = playground("p", "m")
    pg["spec"]["backendRuntimeConfig"] = {"backendName": "llamacpp"}
    cluster.playgrounds.add(pg)
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models/sql") as resp:
        assert resp.status == 200
        entry = await resp.json()
        assert (entry["id"], entry["parent"], entry["capabilities"]) == ("sql", "m", LLAMACPP_CAPABILITIES)


async def test_an_unknown_models_entry_is_404_model_not_found_in_openais_format() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(playground("p", "llama"))
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models/gpt-4") as resp:
        assert resp.status == 404
        assert await resp.json() == {
            "error": {
                "message": "The model `gpt-4` does not exist. Available models: llama.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
        }
        assert gw.sample("llmaz_gateway_requests_total", model="", code="404") == 1


async def test_a_models_entry_needs_an_api_key_and_synced_caches(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("sk-right\n")
    cluster = Cluster()
    cluster.playgrounds.add(playground("p", "m"))
    async with running_gateway(cluster, api_keys=ApiKeys(keys)) as gw:
        async with gw.session.get(gw.url + "/v1/models/m") as resp:
            assert resp.status == 401
            assert is_openai_error(await resp.json())
        async with gw.session.get(gw.url + "/v1/models/m", headers={"Authorization": "Bearer sk-right"}) as resp:
            assert resp.status == 503  # not synced yet: never a 404 from an empty view
            assert is_openai_error(await resp.json())


# --- forwarded endpoints ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "path", "upstream"),
    [
        ("vllm", "/v1/responses", "/v1/responses"),
        ("vllm", "/v1/rerank", "/v1/rerank"),
        ("vllm", "/rerank", "/v1/rerank"),
        ("vllm", "/v1/score", "/v1/score"),
        ("vllm", "/tokenize", "/tokenize"),
        ("vllm", "/detokenize", "/detokenize"),
        ("sglang", "/rerank", "/v1/rerank"),
        ("sglang", "/v1/score", "/v1/score"),
        ("sglang", "/tokenize", "/tokenize"),
        ("llamacpp", "/v1/responses", "/v1/responses"),
        ("llamacpp", "/tokenize", "/tokenize"),
        ("llamacpp", "/detokenize", "/detokenize"),
        ("tgi", "/tokenize", "/tokenize"),
    ],
)
async def test_an_endpoint_the_engine_serves_is_forwarded_to_the_path_it_serves_it_at(
    backend: str, path: str, upstream: str
) -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint, backend=backend)
        async with running_gateway(cluster) as gw:
            raw = b'{"model": "m", "query": "q", "documents": ["a", "b"]}'
            async with gw.session.post(gw.url + path + "?x=1", data=raw) as resp:
                assert resp.status == 200
                assert await resp.json() == {"answered": upstream}
            (seen,) = engine.requests
            assert (seen.method, seen.path_qs, seen.body) == ("POST", upstream + "?x=1", raw)
            assert gw.sample("llmaz_gateway_requests_total", model="m", code="200") == 1


async def test_llamacpp_serves_embeddings_and_reranking_only_with_the_flags_that_turn_them_on() -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("plain", name="pg-plain", backend="llamacpp")
        served(cluster, "embedder", "llamacpp", "--embeddings")
        served(cluster, "reranker", "llamacpp", "--reranking")
        cluster.slices.add(
            endpoint_slice("pg-reranker-lb-0", "pg-reranker-lb", engine.port, ("127.0.0.1", True, False))
        )
        async with running_gateway(cluster) as gw:
            for model, path, status in [
                ("plain", "/v1/embeddings", 501),
                ("plain", "/v1/rerank", 501),
                ("embedder", "/v1/rerank", 501),
                ("reranker", "/v1/rerank", 200),
            ]:
                assert (await gw.post(path, {"model": model}))[0] == status, (model, path)
            assert [seen.path_qs for seen in engine.requests] == ["/v1/rerank"]
            async with gw.session.get(gw.url + "/v1/models") as resp:
                listed = {entry["id"]: entry["capabilities"] for entry in (await resp.json())["data"]}
            assert "embedding" in listed["embedder"]
            assert "rerank" not in listed["embedder"]
            assert {"embedding", "rerank"} <= set(listed["reranker"])
            assert listed["plain"] == LLAMACPP_CAPABILITIES


@pytest.mark.parametrize(
    ("backend", "path"),
    [
        ("tgi", "/v1/embeddings"),
        ("tgi", "/detokenize"),
        ("sglang", "/v1/audio/transcriptions"),
        ("vllm", "/v1/audio/speech"),
        ("llamacpp", "/v1/score"),
    ],
)
async def test_an_endpoint_the_engine_does_not_serve_is_501_at_once_without_waking_the_model(
    backend: str, path: str
) -> None:
    cluster = Cluster().synced()
    served(cluster, "m", backend)  # no endpoint, a replica asked for: a request it served would be held past WAIT
    async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT * 10, wake_timeout=WAIT * 10)) as gw:
        form = aiohttp.FormData({"model": "m"})
        form.add_field("file", b"RIFF", filename="a.wav", content_type="audio/wav")
        data = form if path.startswith("/v1/audio/trans") else orjson.dumps({"model": "m", "input": "hi"})
        async with gw.session.post(gw.url + path, data=data) as resp:
            assert resp.status == 501
            answer = await resp.json()
        assert is_openai_error(answer)
        assert answer["error"]["code"] == "unsupported_endpoint"
        assert answer["error"]["type"] == "invalid_request_error"
        assert path in answer["error"]["message"]
        assert gw.sample("llmaz_gateway_requests_total", model="m", code="501") == 1


async def test_a_model_behind_an_engine_not_known_is_sent_every_endpoint() -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint, backend="my-engine")
        async with running_gateway(cluster) as gw:
            assert (await gw.post("/v1/audio/speech", {"model": "m", "input": "hi", "voice": "a"}))[0] == 200
            assert [seen.path_qs for seen in engine.requests] == ["/v1/audio/speech"]
            async with gw.session.get(gw.url + "/v1/models/m") as resp:
                assert (await resp.json())["capabilities"] == EVERY_CAPABILITY


async def test_a_model_served_by_several_engines_serves_what_any_of_them_does() -> None:
    cluster = Cluster().synced()
    served(cluster, "m", "tgi")
    cluster.services.add(inference_service("alone", "m"))  # no Playground: an engine not known
    async with running_gateway(cluster) as gw, gw.session.get(gw.url + "/v1/models/m") as resp:
        assert (await resp.json())["capabilities"] == EVERY_CAPABILITY


async def test_an_adapter_is_routed_to_its_base_models_endpoints_on_every_endpoint_it_serves() -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        cluster.open_models.add(open_model("m", adapters=[{"name": "sql", "source": {"modelHub": {"modelID": "o/s"}}}]))
        async with running_gateway(cluster) as gw:
            assert (await gw.post("/tokenize", {"model": "sql", "prompt": "hi"}))[0] == 200
            assert orjson.loads(engine.requests[-1].body)["model"] == "sql"  # vLLM serves the adapter by name
            assert gw.sample("llmaz_gateway_requests_total", model="sql", code="200") == 1


@pytest.mark.parametrize("path", ["/v1/images/generations", "/v1/responses/resp_1", "/v1/tokenize", "/v1"])
async def test_an_unknown_path_under_v1_is_404_in_openais_format(path: str) -> None:
    async with running_gateway(Cluster().synced()) as gw, gw.session.post(gw.url + path, data=b"{}") as resp:
        assert resp.status == 404
        answer = await resp.json()
        assert is_openai_error(answer)
        assert answer["error"]["code"] == "unknown_url"


# --- streaming the Responses API ------------------------------------------------------------------------------


async def test_a_streamed_response_reaches_the_client_event_by_event_and_its_usage_is_counted() -> None:
    async with engines(1) as (engine,):

        async def stream(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(RESPONSE_CREATED)
            await engine.release.wait()
            await resp.write(RESPONSE_COMPLETED)
            await resp.write_eof()
            return resp

        engine.handler = stream
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            body = orjson.dumps({"model": "m", "input": "hi", "stream": True})
            async with gw.session.post(gw.url + "/v1/responses", data=body) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), WAIT)
                assert first == RESPONSE_CREATED  # before the engine sent the rest
                engine.release.set()
                assert await asyncio.wait_for(resp.content.read(), WAIT) == RESPONSE_COMPLETED
            assert gw.sample("llmaz_gateway_prompt_tokens_total", model="m") == 13
            assert gw.sample("llmaz_gateway_completion_tokens_total", model="m") == 21


# --- audio uploads: the model is a form field -------------------------------------------------------------------


def upload(model: str | None = "m", audio: bytes = b"RIFF\x00\x01audio") -> aiohttp.FormData:
    """A transcription upload as OpenAI's SDK sends it."""
    form = aiohttp.FormData()
    if model is not None:
        form.add_field("model", model)
    form.add_field("file", audio, filename="speech.wav", content_type="audio/wav")
    form.add_field("response_format", "json")
    return form


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/v1/audio/translations"])
async def test_an_audio_upload_is_routed_by_its_model_field_and_forwarded_byte_for_byte(path: str) -> None:
    async with engines(2) as (other, engine):
        other.handler = engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("other", other.endpoint)
        cluster.serve("whisper", engine.endpoint)
        async with running_gateway(cluster) as gw:
            async with gw.session.post(
                gw.url + path, data=upload("whisper", b"\r\n--not-a-boundary\r\n" * 100)
            ) as resp:
                assert resp.status == 200
                sent_type = resp.request_info.headers["Content-Type"]
            (seen,) = engine.requests
            assert seen.path_qs == path
            assert seen.headers["Content-Type"] == sent_type
            assert sent_type.startswith("multipart/form-data; boundary=")
            assert b'name="model"\r\n\r\nwhisper\r\n' in seen.body
            assert seen.body.count(b"--not-a-boundary") == 100
            assert other.requests == []


async def test_an_upload_with_the_model_after_the_file_is_routed_too() -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            form = aiohttp.FormData()
            form.add_field("file", b"audio", filename="a.wav", content_type="audio/wav")
            form.add_field("model", "m")
            async with gw.session.post(gw.url + "/v1/audio/transcriptions", data=form) as resp:
                assert resp.status == 200


async def test_an_upload_without_a_model_field_is_400_naming_the_field() -> None:
    url = "/v1/audio/transcriptions"
    async with running_gateway(Cluster().synced()) as gw, gw.session.post(gw.url + url, data=upload(None)) as resp:
        assert resp.status == 400
        assert await resp.json() == {
            "error": {
                "message": "The form has no `model` field: send the model's name as the form field `model`.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "missing_model",
            }
        }


async def test_an_upload_without_a_model_field_is_routed_by_the_model_header() -> None:
    async with engines(1) as (engine,):
        engine.handler = answer_json
        cluster = Cluster().synced()
        cluster.serve("m", engine.endpoint)
        async with running_gateway(cluster) as gw:
            headers = {"x-ai-eg-model": "m"}
            async with gw.session.post(gw.url + "/v1/audio/transcriptions", data=upload(None), headers=headers) as r:
                assert r.status == 200
            async with gw.session.post(gw.url + "/v1/audio/transcriptions", data=upload("n"), headers=headers) as r:
                assert r.status == 400
                assert (await r.json())["error"]["code"] == "model_mismatch"


async def test_an_upload_larger_than_the_body_limit_is_413() -> None:
    cluster = Cluster().synced()
    cluster.serve("m")
    big = upload("m", b"\0" * 2048)
    async with (
        running_gateway(cluster, GatewayOptions(max_body_bytes=1024)) as gw,
        gw.session.post(gw.url + "/v1/audio/transcriptions", data=big) as resp,
    ):
        assert resp.status == 413
        answer = await resp.json()
        assert is_openai_error(answer)
        assert answer["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("content_type", "body", "says"),
    [
        ("application/json", b'{"model": "m"}', "multipart/form-data"),
        ("multipart/form-data", b"--x\r\n\r\nm\r\n--x--\r\n", "boundary"),
        ("multipart/form-data; boundary=x", b"no parts at all", "boundary"),
        ("multipart/form-data; boundary=x", b'--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nm', "closing"),
        ("multipart/form-data; boundary=x", b"--x\r\nX-Pad: " + b"a" * 9000 + b"\r\n\r\nm\r\n--x--", "headers"),
    ],
)
async def test_an_upload_that_is_not_a_well_formed_form_is_400_saying_why(
    content_type: str, body: bytes, says: str
) -> None:
    async with running_gateway(Cluster().synced()) as gw:
        headers = {"Content-Type": content_type}
        async with gw.session.post(gw.url + "/v1/audio/transcriptions", data=body, headers=headers) as resp:
            assert resp.status == 400
            answer = await resp.json()
            assert is_openai_error(answer)
            assert says in answer["error"]["message"]
