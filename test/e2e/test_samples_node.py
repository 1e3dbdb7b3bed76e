"""The samples of llmaz-gateway's features, applied as they are on the real node: every model they serve answers
through the gateway, and each does what its header says at the first step (the sleeping one wakes for it).

The samples name the node's object store and the llamacpp BackendRuntime config/node installs, so they apply
unchanged into the test's namespace (with its store credentials). The API keys sample needs a gateway started with
`--api-key-secrets=true`, and the across-namespaces one creates Namespaces of its own: the unit tests check both
against the code that reads them (test/unit/builders/test_gateway_samples.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.objectstore import ObjectStore

from .conftest import REPO
from .serving import BUCKET, KEY, api_chat, assert_completion, credentials, gateway_url, routable
from .support import Environment, eventually, http_request, wait_playground_ready

pytestmark = pytest.mark.tier("node")
SAMPLES = REPO / "config" / "samples"


def _documents(sample: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((SAMPLES / sample).read_text()) if doc]


@pytest.fixture
def applied(e2e: Environment, namespace: str, object_store: ObjectStore) -> Iterator[Any]:
    """Applies a sample into the test's namespace; its cluster-scoped OpenModels are deleted afterwards."""
    done: list[dict[str, Any]] = []

    def apply(sample: str) -> list[dict[str, Any]]:
        documents = _documents(sample)
        for doc in documents:
            if doc["kind"] == "OpenModel":
                assert doc["spec"]["source"]["uri"] == f"s3://{BUCKET}/{KEY}", "the sample reads the node's store"
        e2e.apply([credentials()], namespace)
        e2e.apply(documents, namespace)
        done.extend(documents)
        return documents

    yield apply
    for doc in done:
        if doc["kind"] == "OpenModel":
            e2e.kubectl("delete", "openmodel", doc["metadata"]["name"], "--ignore-not-found", "--wait=false")


def _playgrounds(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in documents if doc["kind"] == "Playground"]


@pytest.mark.parametrize("sample", ["request-autoscaler-llamacpp.yaml", "routing-strategies-llamacpp.yaml"])
def test_every_model_of_a_gateway_feature_sample_answers_through_the_gateway(
    e2e: Environment, namespace: str, applied: Any, sample: str
) -> None:
    playgrounds = _playgrounds(applied(sample))
    assert playgrounds
    for playground in playgrounds:
        replicas = playground["spec"].get("replicas", 1)
        wait_playground_ready(e2e, namespace, playground["metadata"]["name"], replicas=replicas)
    for playground in playgrounds:
        model = playground["spec"]["modelClaim"]["modelName"]
        routable(e2e, model)
        assert_completion(*api_chat(gateway_url(e2e), model, timeout=30), model)


def test_the_scale_to_zero_sample_starts_asleep_and_its_first_request_wakes_it(
    e2e: Environment, namespace: str, applied: Any
) -> None:
    (playground,) = _playgrounds(applied("scale-to-zero-llamacpp.yaml"))
    name = playground["metadata"]["name"]
    model = playground["spec"]["modelClaim"]["modelName"]

    def listed() -> bool:
        status, body = http_request(f"{gateway_url(e2e)}/models")
        assert status == 200, body[:300]
        return model in {entry["id"] for entry in json.loads(body)["data"]}

    eventually(listed, what=f"the gateway listing {model}")
    assert e2e.must_get("playgrounds", name, namespace)["spec"]["replicas"] == 0
    assert e2e.items("pods", namespace, f"leaderworkerset.sigs.k8s.io/name={name}") == [], "asleep: no pod"
    # The gateway holds this request while the replica starts, then answers it.
    assert_completion(*api_chat(gateway_url(e2e), model, timeout=240), model)
    wait_playground_ready(e2e, namespace, name, replicas=1)
