"""`llmaz-gateway --epp-port` serves the Endpoint Picker beside the proxy, from the same catalog the API server
fills: ready once the caches have synced, and routing a request to the Playground's ready endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
        args = [f"--epp-port={epp_port}"]
        async with (
            running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway.log", args),
            grpc.aio.insecure_channel(f"127.0.0.1:{epp_port}") as channel,
        ):
            health: Any = health_pb2_grpc.HealthStub(channel)

            async def ready() -> bool:
                # The EPP says ready once its catalog has synced, which may follow the gateway's /readyz by a moment.
                checked = await health.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=WAIT)
                return bool(checked.status == health_pb2.HealthCheckResponse.SERVING)

            await eventually(ready, within=WAIT, what="the EPP's readiness to say SERVING")

            stub = ext_grpc.ExternalProcessorStub(channel)

            async def routed() -> str | None:
                call = stub.Process()
                header = core.HeaderValue(key=":method", raw_value=b"POST")
                await call.write(
                    ext.ProcessingRequest(request_headers=ext.HttpHeaders(headers=core.HeaderMap(headers=[header])))
                )
                await call.read()
                body = orjson.dumps({"model": model, "messages": []})
                await call.write(ext.ProcessingRequest(request_body=ext.HttpBody(body=body, end_of_stream=True)))
                answer = await call.read()
                await call.done_writing()
                if answer.WhichOneof("response") != "request_body":
                    return None  # the slice is not in the catalog yet
                (option,) = answer.request_body.response.header_mutation.set_headers
                return str(option.header.raw_value.decode())

            destination = await eventually(routed, within=WAIT, what="the EPP to route to the Playground's endpoint")
            assert destination == f"{ENGINE_ADDRESS}:{engine_port}"
    finally:
        admin.request("DELETE", f"/apis/llmaz.io/v1alpha1/openmodels/{model}")
