"""An InferencePool on the real node: it appears with the Playground that asks for it, selects exactly the pods its
`-lb` Service does, names llmaz's endpoint picker through the `llmaz-epp` Service of its own namespace, which
answers gRPC health from the gateway's pods through kube-proxy, and goes with its Playground.

The InferencePool CRD is llmaz's copy (`config/gie`), applied as docs/gateway.md says when a cluster lacks it.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from llmaz.apis import constants as c
from llmaz_dev.envtest.objectstore import ObjectStore

from .conftest import REPO
from .serving import BUCKET, GATEWAY_NAMESPACE, KEY, credentials, served, tiny_llama
from .support import Environment, ModelNames, eventually, wait_playground_ready

pytestmark = pytest.mark.tier("node")
POOLS = "inferencepools.inference.networking.k8s.io"
EXT_PROC = "envoy.service.ext_proc.v3.ExternalProcessor"


def _epp_serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            health: Any = health_pb2_grpc.HealthStub(channel)  # the generated stubs' types lack the methods
            answer = health.Check(health_pb2.HealthCheckRequest(service=EXT_PROC), timeout=5)
        except grpc.RpcError:
            return False  # the mirrored endpoints or kube-proxy's rules are still on their way
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def test_a_playground_asking_for_an_inference_pool_gets_one_that_reaches_the_endpoint_picker_and_goes_with_it(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    e2e.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "gie"))
    e2e.kubectl("wait", "--for=condition=Established", f"crd/{POOLS}", "--timeout=60s")
    model = models.new("pooled")
    playground = served("pooled", model, object_store)
    playground["metadata"]["annotations"] = {c.INFERENCE_POOL_ANNOTATION: "true"}
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), playground], namespace)
    wait_playground_ready(e2e, namespace, "pooled", replicas=1)

    def pool() -> dict[str, Any] | None:
        found = e2e.kubectl("get", POOLS, "pooled", "-n", namespace, "-o", "json", "--ignore-not-found")
        return json.loads(found) if found.strip() else None

    found = eventually(pool, what="the InferencePool of Playground pooled")
    spec = found["spec"]
    lb = e2e.must_get("services", "pooled-lb", namespace)
    assert spec["selector"] == {"matchLabels": lb["spec"]["selector"]}, "the pods the -lb Service serves"
    assert spec["targetPorts"] == [{"number": 8080}]
    picker = spec["endpointPickerRef"]
    assert (picker["kind"], picker["name"], picker["port"]) == ("Service", c.EPP_SERVICE_NAME, {"number": 9002})
    assert picker["failureMode"] == "FailClose"
    owners = found["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [("Playground", "pooled", True)]

    epp = eventually(lambda: e2e.get("services", c.EPP_SERVICE_NAME, namespace), what="the llmaz-epp Service")
    gateways = e2e.items("pods", GATEWAY_NAMESPACE, "app.kubernetes.io/component=gateway")
    gateway_pods = {pod["status"]["podIP"] for pod in gateways}

    def mirrored() -> bool:
        slices = e2e.items("endpointslices", namespace, f"kubernetes.io/service-name={c.EPP_SERVICE_NAME}")
        addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
        return bool(addresses) and addresses <= gateway_pods

    eventually(mirrored, what="llmaz-epp's EndpointSlice naming the gateway's pods")
    eventually(lambda: _epp_serving(f"{epp['spec']['clusterIP']}:9002"), what="the endpoint picker through llmaz-epp")

    e2e.kubectl("delete", "playground", "pooled", "-n", namespace, "--wait=true")
    eventually(lambda: pool() is None, within=120, what="the pool gone with its Playground")
    eventually(
        lambda: e2e.get("services", c.EPP_SERVICE_NAME, namespace) is None, what="llmaz-epp gone with the last pool"
    )
