"""The gateway process exports a request's spans over OTLP/HTTP to a collector: a loopback aiohttp server that
accepts `POST /v1/traces` and decodes the protobuf the way a collector does (opentelemetry-proto)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .conftest import ENGINE_ADDRESS, Engine, loopback_server, running_gateway

WAIT = 30.0
CHAT = "/v1/chat/completions"
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
STEPS = {"pick", "upstream"}


@dataclass
class Collector:
    """An OTLP/HTTP traces receiver on 127.0.0.1: every span it was sent, and the service that sent it."""

    spans: list[Span] = field(default_factory=list)
    services: set[str] = field(default_factory=set)
    port: int = 0

    async def traces(self, request: web.Request) -> web.Response:
        assert request.headers["Content-Type"] == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource_spans in export.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    self.services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")


@pytest_asyncio.fixture
async def collector() -> AsyncIterator[Collector]:
    found = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    async with loopback_server(app) as found.port:
        yield found


def _objects(namespace: str, model: str, engine_port: int) -> list[tuple[str, dict[str, Any]]]:
    labels = {"kubernetes.io/service-name": "pg-lb", "app.kubernetes.io/managed-by": "llmaz"}
    return [
        (
            "/apis/llmaz.io/v1alpha1/openmodels",
            {
                "apiVersion": "llmaz.io/v1alpha1",
                "kind": "OpenModel",
                "metadata": {"name": model},
                "spec": {"familyName": "tiny", "source": {"modelHub": {"modelID": "x/tiny"}}},
            },
        ),
        (
            f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds",
            {
                "apiVersion": "inference.llmaz.io/v1alpha1",
                "kind": "Playground",
                "metadata": {"name": "pg", "namespace": namespace},
                "spec": {"modelClaim": {"modelName": model}},
            },
        ),
        (
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "pg-lb-abcde", "namespace": namespace, "labels": labels},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": engine_port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [ENGINE_ADDRESS], "conditions": {"ready": True, "serving": True}}],
            },
        ),
    ]


async def test_a_request_s_spans_reach_the_collector_in_the_client_s_trace_which_the_engine_is_sent(
    control_plane: Cluster,
    namespace: str,
    engine: Engine,
    collector: Collector,
    gateway_kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # the batch leaves within 0.2 s rather than 5 s
    admin = control_plane.admin_client()
    model = f"traced-{namespace}"
    objects = _objects(namespace, model, engine.port)
    for collection, obj in objects:
        admin.request("POST", collection, obj)
    endpoint = f"--otlp-endpoint=http://127.0.0.1:{collector.port}"
    try:
        async with (
            running_gateway(gateway_kubeconfig, namespace, tmp_path / "gateway.log", [endpoint]) as gateway,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as session,
        ):

            async def answered() -> bool:
                headers = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "Authorization": "Bearer sk-x-1"}
                body = orjson.dumps({"model": model, "messages": []})
                async with session.post(gateway.api + CHAT, data=body, headers=headers) as resp:
                    return resp.status == 200

            await eventually(answered, within=WAIT, what="the model routed")
            await eventually(
                lambda: any(s.kind == Span.SPAN_KIND_SERVER and s.attributes for s in collector.spans),
                within=WAIT,
                what="the request's spans at the collector",
            )
    finally:
        for collection, obj in reversed(objects):
            admin.request("DELETE", f"{collection}/{obj['metadata']['name']}")
    assert collector.services == {"llmaz-gateway"}
    traced = [s for s in collector.spans if s.trace_id.hex() == CLIENT_TRACE]
    (root,) = [
        s for s in traced if s.kind == Span.SPAN_KIND_SERVER and _attrs(s).get("http.response.status_code") == 200
    ]
    assert root.name == f"POST {CHAT}"
    assert root.parent_span_id.hex() == CLIENT_SPAN
    assert _attrs(root)["llmaz.model"] == model
    children = {s.name: s for s in traced if s.parent_span_id == root.span_id}
    assert STEPS | {"stream"} <= set(children)
    assert _attrs(children["stream"])["gen_ai.usage.output_tokens"] == 3
    sent = engine.traceparents[-1]
    assert sent is not None
    assert sent.split("-")[1:3] == [CLIENT_TRACE, children["upstream"].span_id.hex()]
    for span in collector.spans:
        assert not any("sk-x-1" in str(value) for value in _attrs(span).values()), span.name


def _attrs(span: Span) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = getattr(value, value.WhichOneof("value") or "string_value")
    return values
