"""Tracing on the real node: llmaz-gateway, pointed at an OTLP/HTTP receiver with `--otlp-endpoint`, exports one
chat's spans, from the client's trace through the pick and the call to the llama.cpp engine to the end of the
answer, in one trace id.

The receiver is a small HTTP server on the node's host address (where the pods also reach the object store) that
decodes `POST /v1/traces` the way a collector does (opentelemetry-proto). The gateway's Deployment gets the flag as
docs/operations.md shows (a JSON patch of its args) and is rolled back afterwards.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from llmaz_dev.envtest.objectstore import ObjectStore

from .serving import gateway_patched, gateway_url, node_of, routable, serve_chat
from .support import Environment, ModelNames, chat_request, eventually, http_request

pytestmark = pytest.mark.tier("node")
CLIENT_TRACE = "5af7183fc1d34c2a8e6f1b0c9d2e3f40"
CLIENT_SPAN = "a1b2c3d4e5f60718"


@dataclass
class Receiver:
    """Every span an OTLP/HTTP exporter sent, and the services that sent them."""

    spans: list[Span] = field(default_factory=list)
    services: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        export = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for resource_spans in export.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.services.add(attribute.value.string_value)
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)

    def of_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [span for span in self.spans if span.trace_id.hex() == trace_id]


@pytest.fixture
def receiver(e2e: Environment) -> Iterator[tuple[Receiver, str]]:
    """The receiver, listening on the node's host address, and its base URL."""
    found = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(404)
                return
            found.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the test reads the spans, not the access log

    host = node_of(e2e).layout.host_ip
    server = http.server.ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield found, f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def tracing_gateway(e2e: Environment, receiver: tuple[Receiver, str]) -> Iterator[Receiver]:
    """The node's gateway exporting its spans to the receiver; rolled back afterwards."""
    found, url = receiver
    patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": f"--otlp-endpoint={url}"}]
    with gateway_patched(e2e, patch):
        yield found


def test_one_chats_spans_reach_a_collector_in_the_clients_trace_from_the_pick_to_the_engine_and_the_answer(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore, tracing_gateway: Receiver
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    routable(e2e, model)  # the rolled-out gateway pods know the model: their own spans of it are not this trace's
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    status, body = http_request(
        f"{gateway_url(e2e)}/chat/completions",
        method="POST",
        body=chat_request(model),
        headers={"Content-Type": "application/json", "traceparent": traceparent},
        timeout=30,
    )
    assert status == 200, body[:300]

    def spans_of_the_chat() -> dict[str, Span] | None:
        spans = {span.name: span for span in tracing_gateway.of_trace(CLIENT_TRACE)}
        return spans if {"POST /v1/chat/completions", "pick", "upstream", "stream"} <= set(spans) else None

    spans = eventually(spans_of_the_chat, within=60, what="the chat's spans at the receiver")
    assert "llmaz-gateway" in tracing_gateway.services
    server = spans["POST /v1/chat/completions"]
    assert server.parent_span_id.hex() == CLIENT_SPAN, "the gateway continues the client's trace"
    for name in ("pick", "upstream", "stream"):
        assert spans[name].parent_span_id == server.span_id, name
    upstream = {a.key: a.value for a in spans["upstream"].attributes}
    assert upstream["http.response.status_code"].int_value == 200
    assert upstream["server.port"].int_value == 8080  # the llama.cpp engine's pod, not a Service
    usage = {a.key: a.value for a in spans["stream"].attributes}
    assert usage["gen_ai.usage.input_tokens"].int_value > 0
