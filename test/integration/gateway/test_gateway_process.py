"""The gateway process routes by what the API server holds: models listed from OpenModels and Playgrounds,
requests sent to the ready endpoints of the Playground's `-lb` EndpointSlice, and it stops gracefully."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import aiohttp
import orjson

from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .conftest import ENGINE_ADDRESS, Engine, GatewayProcess

WAIT = 30.0
CHAT = "/v1/chat/completions"


def _objects(namespace: str, model: str, engine_port: int) -> tuple[dict[str, Any], ...]:
    open_model = {
        "apiVersion": "llmaz.io/v1alpha1",
        "kind": "OpenModel",
        "metadata": {"name": model},
        "spec": {
            "familyName": "tiny",
            "source": {"modelHub": {"modelID": "x/tiny"}},
            "ownedBy": "acme",
            "createdAt": "2024-01-01T00:00:00Z",
        },
    }
    playground = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "pg", "namespace": namespace},
        "spec": {"modelClaim": {"modelName": model}},
    }
    # What the EndpointSlice controller writes for the `pg-lb` Service once the engine's pod is ready, with the
    # Service's own label (the manager's), which it copies onto the slice. The pod IP is ENGINE_ADDRESS, which the
    # gateway is told to reach at 127.0.0.1 (see conftest).
    labels = {"kubernetes.io/service-name": "pg-lb", "app.kubernetes.io/managed-by": "llmaz"}
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "pg-lb-abcde", "namespace": namespace, "labels": labels},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": engine_port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ENGINE_ADDRESS], "conditions": {"ready": True, "serving": True}}],
    }
    return open_model, playground, endpoint_slice


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with session.post(url, data=orjson.dumps(body)) as resp:
        return resp.status, await resp.json()


async def test_models_are_listed_and_requests_routed_to_the_playgrounds_ready_endpoints(
    control_plane: Cluster, namespace: str, engine: Engine, gateway: GatewayProcess
) -> None:
    admin = control_plane.admin_client()
    model = f"gw-{namespace}"
    open_model, playground, endpoint_slice = _objects(namespace, model, engine.port)
    admin.request("POST", "/apis/llmaz.io/v1alpha1/openmodels", open_model)
    try:
        admin.request("POST", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds", playground)
        slices = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        admin.request("POST", slices, endpoint_slice)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:

            async def listed() -> list[dict[str, Any]]:
                async with session.get(gateway.api + "/v1/models") as resp:
                    return [m for m in (await resp.json())["data"] if m["id"] == model]

            card = await eventually(listed, within=WAIT, what="the model in /v1/models")
            # The Playground names no backend: vLLM, the default, and so what vLLM serves.
            served = ["chat", "completion", "embedding", "responses", "rerank", "score", "transcription", "translation",
                      "tokenize", "detokenize"]  # fmt: skip
            assert card == [
                {"id": model, "object": "model", "created": 1704067200, "owned_by": "acme", "capabilities": served}
            ]

            status, answer = await _post(session, gateway.api + CHAT, {"model": model, "messages": []})
            assert (status, answer["object"]) == (200, "chat.completion")
            assert engine.bodies == [{"model": model, "messages": []}]

            async with session.get(gateway.metrics + "/metrics") as resp:
                text = await resp.text()
            assert f'llmaz_gateway_requests_total{{code="200",model="{model}"}} 1.0' in text
            assert f'llmaz_gateway_completion_tokens_total{{model="{model}"}} 3.0' in text

            # The endpoint turns unready: the model stays listed but has nowhere to go.
            endpoint_slice["endpoints"][0]["conditions"]["ready"] = False
            admin.request("PUT", f"{slices}/pg-lb-abcde", {**endpoint_slice, "metadata": _current(admin, slices)})

            async def unready() -> bool:
                return (await _post(session, gateway.api + CHAT, {"model": model}))[0] == 503

            await eventually(unready, within=WAIT, what="503 once the endpoint is unready")

            admin.request("DELETE", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds/pg")

            async def gone() -> bool:
                status, answer = await _post(session, gateway.api + CHAT, {"model": model})
                return status == 404 and answer["error"]["code"] == "model_not_found"

            await eventually(gone, within=WAIT, what="404 once the Playground is deleted")
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")


def _current(admin: Any, slices: str) -> dict[str, Any]:
    meta: dict[str, Any] = admin.request("GET", f"{slices}/pg-lb-abcde")["metadata"]
    return meta


async def test_sigterm_stops_accepting_and_lets_an_in_flight_stream_finish_before_exiting(
    control_plane: Cluster, namespace: str, engine: Engine, gateway: GatewayProcess
) -> None:
    admin = control_plane.admin_client()
    model = f"gw-{namespace}"
    open_model, playground, endpoint_slice = _objects(namespace, model, engine.port)
    admin.request("POST", "/apis/llmaz.io/v1alpha1/openmodels", open_model)
    try:
        admin.request("POST", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds", playground)
        admin.request("POST", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", endpoint_slice)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session:

            async def routed() -> bool:
                async with session.post(gateway.api + CHAT, data=orjson.dumps({"model": model})) as resp:
                    return resp.status == 200

            await eventually(routed, within=WAIT, what="the model routed")
            body = orjson.dumps({"model": model, "stream": True})
            async with session.post(gateway.api + CHAT, data=body) as stream:
                first = await asyncio.wait_for(stream.content.readuntil(b"\n\n"), WAIT)
                assert first.startswith(b"data: ")
                os.kill(gateway.process.pid, signal.SIGTERM)

                async def refused() -> bool:
                    try:
                        async with aiohttp.ClientSession() as fresh, fresh.get(gateway.api + "/v1/models"):
                            return False
                    except aiohttp.ClientConnectionError:
                        return True

                await eventually(refused, within=WAIT, what="the listener closed after SIGTERM")
                assert gateway.process.exit_code() is None  # still draining the stream
                engine.release.set()
                assert await asyncio.wait_for(stream.content.read(), WAIT) == b"data: [DONE]\n\n"
        assert await eventually(lambda: gateway.process.exit_code() is not None, within=WAIT, what="exit")
        assert gateway.process.exit_code() == 0, gateway.process.log_tail()
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")


def _events(admin: Any, namespace: str, reason: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = admin.request("GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")[
        "items"
    ]
    return [e for e in events if e.get("reason") == reason and e["regarding"]["name"] == "pg"]


async def test_a_sleeping_playground_is_woken_once_by_concurrent_requests_and_put_back_to_sleep_when_idle(
    control_plane: Cluster, namespace: str, engine: Engine, gateway: GatewayProcess
) -> None:
    """With the generated RBAC only, against the API server's own scale subresource and optimistic concurrency."""
    admin = control_plane.admin_client()
    model = f"gw-{namespace}"
    open_model, playground, endpoint_slice = _objects(namespace, model, engine.port)
    playground["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "10s"}
    playground["spec"]["replicas"] = 0
    path = f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds"
    admin.request("POST", "/apis/llmaz.io/v1alpha1/openmodels", open_model)
    try:
        admin.request("POST", path, playground)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT * 2)) as session:

            async def listed() -> bool:
                async with session.get(gateway.api + "/v1/models") as resp:
                    return model in [m["id"] for m in (await resp.json())["data"]]

            await eventually(listed, within=WAIT, what="the model in /v1/models")
            requests = [
                asyncio.create_task(_post(session, gateway.api + CHAT, {"model": model, "messages": []}))
                for _ in range(10)
            ]

            async def scaled_up() -> bool:
                return int(admin.request("GET", f"{path}/pg")["spec"]["replicas"]) == 1

            await eventually(scaled_up, within=WAIT, what="the Playground scaled to 1")
            assert not any(r.done() for r in requests)  # held while nothing is ready
            # The engine's pod becomes ready: what the EndpointSlice controller then writes.
            admin.request("POST", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", endpoint_slice)
            answers = await asyncio.wait_for(asyncio.gather(*requests), WAIT)
            assert [status for status, _ in answers] == [200] * 10
            assert len(engine.bodies) == 10
            woken = _events(admin, namespace, "ScaledFromZero")
            assert [e["note"] for e in woken] == [f"Scaled from 0 to 1 replica for a request for model {model}"]
            stored = admin.request("GET", f"{path}/pg")
            assert "llmaz.io/last-request-time" in stored["metadata"]["annotations"]

            async def asleep() -> bool:
                return int(admin.request("GET", f"{path}/pg")["spec"].get("replicas", 0)) == 0

            await eventually(asleep, within=WAIT, what="the idle Playground scaled back to 0")
            slept = _events(admin, namespace, "ScaledToZero")
            assert [e["note"] for e in slept] == ["Scaled from 1 to 0 replicas: no request for 10s"]
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")
