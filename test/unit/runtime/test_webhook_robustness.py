"""Property: whatever arrives, every llmaz webhook answers HTTP 200 with a well-formed AdmissionReview, and no
handler ever raises (the panic counter stays put).

Inputs: arbitrary bytes, arbitrary JSON, review-shaped JSON with random fields, and valid objects of the four
kinds mutated at random paths (values replaced by arbitrary JSON, members deleted).
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmaz.runtime.metrics import REGISTRY
from llmaz.runtime.webhook import WebhookServer
from llmaz.webhooks import StaticLookup, webhooks

HOOKS = webhooks(StaticLookup(backends={"vllm": ["default"]}, models={"m"}))
HOOKS_BY_PATH = {h.path: h for h in HOOKS}
PATHS = [h.path for h in HOOKS]
SERVER = WebhookServer(HOOKS, tls=False)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)

BASES: dict[str, tuple[str, dict[str, Any]]] = {
    "OpenModel": (
        "llmaz.io",
        {
            "metadata": {"name": "m", "labels": {"a": "b"}},
            "spec": {
                "familyName": "f",
                "source": {
                    "modelHub": {"name": "ModelScope", "filename": "x", "allowPatterns": ["a"]},
                    "uri": "oss://b.e/p",
                },
                "createdAt": "2024-01-01T00:00:00Z",
            },
        },
    ),
    "BackendRuntime": (
        "inference.llmaz.io",
        {
            "metadata": {"name": "vllm"},
            "spec": {
                "image": "i",
                "version": "v",
                "recommendedConfigs": [
                    {"name": "default", "resources": {"limits": {"cpu": 1}, "requests": {"cpu": "2"}}},
                    {"name": "default"},
                ],
            },
        },
    ),
    "Playground": (
        "inference.llmaz.io",
        {
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {
                "modelClaims": {"models": [{"name": "m", "role": "main"}, {"name": "d", "role": "draft"}]},
                "backendRuntimeConfig": {
                    "backendName": "vllm",
                    "configName": "x",
                    "resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}},
                },
                "elasticConfig": {"minReplicas": 0, "maxReplicas": 1, "scaleTrigger": {}},
            },
        },
    ),
    "Service": (
        "inference.llmaz.io",
        {
            "metadata": {"name": "s", "namespace": "n"},
            "spec": {
                "modelClaims": {"models": [{"name": "m"}, {"name": "d", "role": "draft"}]},
                "workloadTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "model-runner"}]}}},
            },
        },
    ),
}


@st.composite
def mutated(draw: st.DrawFn, document: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    for _ in range(draw(st.integers(0, 4))):
        node: Any = doc
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            key = draw(st.sampled_from(list(node) if isinstance(node, dict) else list(range(len(node)))))
            child = node[key]
            if not isinstance(child, dict | list) or draw(st.integers(0, 3)) == 0:
                if isinstance(node, dict) and draw(st.booleans()):
                    del node[key]
                else:
                    node[key] = draw(json_values)
                break
            node = child
    return doc


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(list(BASES)))
    group, base = BASES[kind]
    request: dict[str, Any] = {
        "uid": draw(st.text(min_size=1, max_size=10) | json_values),
        "kind": draw(st.just({"group": group, "version": "v1alpha1", "kind": kind}) | json_values),
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""]) | json_values),
        "name": draw(st.sampled_from(["", "x", "Bad.Name"]) | json_values),
        "object": draw(mutated(base) | json_values),
    }
    for key in draw(st.sets(st.sampled_from(list(request)), max_size=2)):
        del request[key]
    api_version = draw(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1", "v1"]))
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


@pytest.fixture(scope="module")
def client() -> Iterator[tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]]]:
    loop = asyncio.new_event_loop()
    test_client: TestClient[Any, Any] = TestClient(TestServer(SERVER.app()), loop=loop)
    loop.run_until_complete(test_client.start_server())
    yield loop, test_client
    loop.run_until_complete(test_client.close())
    loop.close()


def post(
    client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]], path: str, body: bytes, content_type: str
) -> dict[str, Any]:
    """Over HTTP: the status must be 200 and the body a well-formed review."""
    loop, test_client = client

    async def go() -> tuple[int, bytes]:
        resp = await test_client.post(path, data=body, headers={"Content-Type": content_type})
        return resp.status, await resp.read()

    status, raw = loop.run_until_complete(go())
    assert status == 200
    return well_formed(raw)


def review_(
    client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]], path: str, body: bytes, content_type: str
) -> dict[str, Any]:
    """The same server path without the HTTP transport, so thousands of examples stay quick."""
    loop, _ = client
    return well_formed(loop.run_until_complete(SERVER.review(HOOKS_BY_PATH[path], body, content_type)))


def well_formed(raw: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(raw)
    assert doc["kind"] == "AdmissionReview"
    assert doc["apiVersion"] in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
    response: dict[str, Any] = doc["response"]
    assert isinstance(response["uid"], str)
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] in (400, 403)
        assert response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(orjson.loads(base64.b64decode(response["patch"])), list)
    return response


def panics() -> float:
    return REGISTRY.get_sample_value("controller_runtime_webhook_panics_total") or 0.0


SLOW_EXAMPLES_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW_EXAMPLES_OK
@given(path=st.sampled_from(PATHS), review=reviews())
def test_generated_and_mutated_reviews_get_a_well_formed_answer(
    client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]], path: str, review: dict[str, Any]
) -> None:
    before = panics()
    response = review_(client, path, orjson.dumps(review), "application/json")
    uid = review["request"].get("uid")
    # Allowed or denied, a request with a uid is answered with it: the API server matches answers by uid.
    if isinstance(uid, str):
        assert response["uid"] == uid
    assert panics() == before


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(PATHS),
    body=st.binary(max_size=200) | json_values.map(orjson.dumps),
    content_type=st.sampled_from(["application/json", "text/plain", "application/json; charset=utf-8", ""]),
)
def test_arbitrary_bodies_get_a_well_formed_answer(
    client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]], path: str, body: bytes, content_type: str
) -> None:
    before = panics()
    review_(client, path, body, content_type)
    assert panics() == before


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(PATHS),
    body=st.binary(max_size=200) | reviews().map(orjson.dumps),
    content_type=st.sampled_from(["application/json", "text/plain", ""]),
)
def test_over_http_every_answer_is_a_200_with_a_well_formed_review(
    client: tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]], path: str, body: bytes, content_type: str
) -> None:
    before = panics()
    post(client, path, body, content_type)
    assert panics() == before
