"""`llmaz-gateway --epp-port` serves the Endpoint Picker beside the proxy, from the same catalog the API server
fills: ready once the caches have synced, and routing a request to the Playground's ready endpoint, with the
proxy's API keys (a request without one is refused 401, and no key is logged) and its one count of requests in
flight (the proxy's in-flight gauge shows a request routed by the EPP until its stream ends)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import orjson
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._process import free_loopback_ports
from llmaz_dev.testing.waiting import eventually

from .conftest import ENGINE_ADDRESS, running_gateway

WAIT = 30.0
KEY = "sk-epp-process-key"


async def _zero(value: Callable[[], Awaitable[float]]) -> bool:
    return await value() == 0


async def test_the_gateway_process_serves_the_endpoint_picker_on_its_catalog(
    control_plane: Cluster, namespace: str, gateway_kubeconfig: Path, tmp_path: Path
) -> None:
    admin = control_plane.admin_client()
    model, engine_port = f"epp-{namespace}", 8000
    admin.request(
        "POST",
        "/apis/llmaz.io/v1alpha1/openmodels",
        {
            "apiVersion": "llmaz.io/v1alpha1",
            "kind": "OpenModel",
            "metadata": {"name": model},
            "spec": {"familyName": "tiny", "source": {"modelHub": {"modelID": "x/tiny"}}},
        },
    )
    try:
        admin.request(
            "POST",
            f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds",
            {
                "apiVersion": "inference.llmaz.io/v1alpha1",
                "kind": "Playground",
                "metadata": {"name": "pg", "namespace": namespace},
                "spec": {"modelClaim": {"modelName": model}},
            },
        )
        labels = {"kubernetes.io/service-name": "pg-lb", "app.kubernetes.io/managed-by": "llmaz"}
        admin.request(
            "POST",
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "pg-lb-abcde", "namespace": namespace, "labels": labels},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": engine_port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [ENGINE_ADDRESS], "conditions": {"ready": True, "serving": True}}],
            },
        )
        (epp_port,) = free_loopback_ports(1)
        keys = tmp_path / "keys"
        keys.write_text(f"{KEY} tenant=team-a\n")
        args = [f"--epp-port={epp_port}", f"--api-keys-file={keys}"]
        log = tmp_path / "gateway.log"
        async with (
            running_gateway(gateway_kubeconfig, namespace, log, args) as gateway,
            grpc.aio.insecure_channel(f"127.0.0.1:{epp_port}") as channel,
            aiohttp.ClientSession() as session,
        ):
            health: Any = health_pb2_grpc.HealthStub(channel)

            async def ready() -> bool:
                # The EPP says ready once its catalog has synced, which may follow the gateway's /readyz by a moment.
                checked = await health.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=WAIT)
                return bool(checked.status == health_pb2.HealthCheckResponse.SERVING)

            await eventually(ready, within=WAIT, what="the EPP's readiness to say SERVING")

            stub = ext_grpc.ExternalProcessorStub(channel)

            def request_headers(authorization: str | None) -> ext.ProcessingRequest:
                headers = [core.HeaderValue(key=":method", raw_value=b"POST")]
                if authorization is not None:
                    headers.append(core.HeaderValue(key="authorization", raw_value=authorization.encode()))
                return ext.ProcessingRequest(request_headers=ext.HttpHeaders(headers=core.HeaderMap(headers=headers)))

            refused = stub.Process()
            await refused.write(request_headers(f"Bearer {KEY}-wrong"))
            answer = await refused.read()
            await refused.done_writing()
            assert answer.immediate_response.status.code == 401
            assert orjson.loads(answer.immediate_response.body)["error"]["code"] == "invalid_api_key"

            async def in_flight() -> float:
                async with session.get(gateway.metrics + "/metrics") as resp:
                    text = await resp.text()
                line = f'llmaz_gateway_requests_in_flight{{model="{model}"}} '
                values = [float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line)]
                return values[0] if values else 0.0

            call = stub.Process()
            await call.write(request_headers(f"Bearer {KEY}"))
            await call.read()
            body = orjson.dumps({"model": model, "messages": []})
            await call.write(ext.ProcessingRequest(request_body=ext.HttpBody(body=body, end_of_stream=True)))
            answer = await asyncio.wait_for(call.read(), WAIT)  # held until the slice is in the catalog
            (option,) = answer.request_body.response.header_mutation.set_headers
            assert option.header.raw_value.decode() == f"{ENGINE_ADDRESS}:{engine_port}"
            assert list(answer.request_body.response.header_mutation.remove_headers) == ["authorization"]
            assert await in_flight() == 1  # the proxy's gauge: the EPP counts on the proxy's one count
            await call.done_writing()
            await eventually(lambda: _zero(in_flight), within=WAIT, what="the request to end when its stream does")
        assert KEY not in log.read_text()
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")
