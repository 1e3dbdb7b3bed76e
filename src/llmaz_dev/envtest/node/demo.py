"""The demo model `make run` serves on the node: the tiny llama from the local object store, timed phase by phase.

`serve_demo` uploads the tiny model to the store, applies `config/samples/tiny-llama.yaml` (with the loader's
Secret) into `namespace`, and follows the Playground from apply to its first answer, reporting each phase as it
passes: the pod scheduled, the model loader done, the engine Ready, the first chat completion. The same timings
are what the benchmark's time-to-first-token reports.

`serve_inference_pool` then gives the demo an InferencePool, for a Gateway API Inference Extension gateway: the
CRD from `config/gie` when the cluster lacks it (as docs/gateway.md says), the Playground's
`llmaz.io/inference-pool` annotation, and a wait for the pool and the endpoint picker's Service (`llmaz-epp`) in
its namespace.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from llmaz.apis.constants import EPP_PORT, EPP_SERVICE_NAME, INFERENCE_POOL_ANNOTATION
from llmaz_dev.envtest._assets import source_root
from llmaz_dev.envtest._cluster import Cluster
from llmaz_dev.envtest._rest import ApiError
from llmaz_dev.envtest.objectstore import ACCESS_KEY_ID, SECRET_ACCESS_KEY, ObjectStore, tiny_model

DEMO_NAME = "tiny-llama"
DEMO_BUCKET = "models"
DEMO_KEY = "tiny-llama/tiny-llama.gguf"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
POOLS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencepools.inference.networking.k8s.io"
_POLL = 0.2


class DemoError(RuntimeError):
    """The demo model did not answer in time; the message says which phase it was stuck in and why."""


@dataclass
class Phases:
    """Seconds from apply to each phase, in the order they happen."""

    seconds: dict[str, float] = field(default_factory=dict)

    def mark(self, phase: str, started: float) -> float:
        self.seconds[phase] = time.monotonic() - started
        return self.seconds[phase]


def chat_body(model: str, content: str = "Hello!", max_tokens: int = 16) -> bytes:
    # max_tokens always: random weights rarely produce an end token.
    request = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    return json.dumps(request).encode()


def chat(url: str, model: str, timeout: float = 30.0) -> dict[str, Any]:
    """POST a chat completion to `url` (an engine or `-lb` Service base URL); the answer as JSON."""
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=chat_body(model), headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http(s)_proxy
    with opener.open(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def upload_tiny_model(store: ObjectStore) -> str:
    return store.upload(DEMO_BUCKET, DEMO_KEY, tiny_model())


def serve_demo(
    cluster: Cluster, namespace: str, say: Callable[[str], None], timeout: float = 300.0
) -> tuple[str, dict[str, Any], Phases]:
    """Apply the demo and wait for its first answer; return the `-lb` URL, the answer and the phase timings."""
    root = source_root()
    assert root is not None, "the demo sample lives in the source checkout"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "aws-access-secret", "namespace": namespace},
        "stringData": {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY},
    }
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(secret))
    started = time.monotonic()
    cluster.kubectl("apply", "--server-side", "-n", namespace, "-f", str(root / "config/samples/tiny-llama.yaml"))
    phases = Phases()
    client = cluster.admin_client()
    deadline = started + timeout
    pending = ["scheduled", "model loaded", "engine ready"]
    while pending:
        pod = _pod(client, namespace)
        if pod is not None:
            reached = _reached(pod)
            while pending and pending[0] in reached:
                say(f"  {pending[0]:<13} {phases.mark(pending.pop(0), started):5.1f} s")
        if pending and time.monotonic() > deadline:
            raise DemoError(f"the demo Playground is stuck before '{pending[0]}': {_why(client, namespace, pod)}")
        time.sleep(_POLL)
    service = client.request("GET", f"/api/v1/namespaces/{namespace}/services/{DEMO_NAME}-lb")
    url = f"http://{service['spec']['clusterIP']}:8080"
    answer = wait_answer(url, DEMO_NAME, deadline - time.monotonic())
    say(f"  {'first answer':<13} {phases.mark('first answer', started):5.1f} s")
    return url, answer, phases


def serve_inference_pool(cluster: Cluster, namespace: str, timeout: float = 60.0) -> str:
    """Give the demo Playground an InferencePool (see the module docstring); return its picker's `ip:port`."""
    client = cluster.admin_client()
    if not client.exists(POOLS_CRD):
        root = source_root()
        assert root is not None, "config/gie lives in the source checkout"
        cluster.kubectl("apply", "--server-side", "-k", str(root / "config" / "gie"))
    annotation = f"{INFERENCE_POOL_ANNOTATION}=true"
    cluster.kubectl("annotate", "--overwrite", "-n", namespace, "playground", DEMO_NAME, annotation)
    pool = f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/{DEMO_NAME}"
    picker = f"/api/v1/namespaces/{namespace}/services/{EPP_SERVICE_NAME}"
    deadline = time.monotonic() + timeout
    while not (client.exists(pool) and client.exists(picker)):
        if time.monotonic() > deadline:
            raise DemoError(f"no InferencePool {namespace}/{DEMO_NAME} and picker Service within {timeout:.0f} s")
        time.sleep(_POLL)
    return f"{client.request('GET', picker)['spec']['clusterIP']}:{EPP_PORT}"


def wait_answer(url: str, model: str, timeout: float) -> dict[str, Any]:
    """The first chat completion from `url`, retried while it is refused or not yet routed, up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return chat(url, model)
        except (OSError, urllib.error.URLError) as error:
            # A Service's endpoints (and the gateway's routes) follow the pod's readiness by a moment; an
            # HTTPError is an URLError too: the gateway's 503 before it has seen the endpoint.
            if time.monotonic() > deadline:
                raise DemoError(f"{url} did not answer: {error}") from None
            time.sleep(_POLL)


def _pod(client: Any, namespace: str) -> dict[str, Any] | None:
    pods = client.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": f"{LWS_NAME_LABEL}={DEMO_NAME}"}
    )["items"]
    live = [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]
    return live[0] if live else None


def _reached(pod: dict[str, Any]) -> set[str]:
    status = pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    reached = set()
    if conditions.get("PodScheduled") == "True":
        reached.add("scheduled")
    if conditions.get("Initialized") == "True":
        reached.add("model loaded")
    if conditions.get("Ready") == "True":
        reached.add("engine ready")
    return reached


def _why(client: Any, namespace: str, pod: dict[str, Any] | None) -> str:
    if pod is None:
        try:
            playground = client.request(
                "GET", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{namespace}/playgrounds/{DEMO_NAME}"
            )
        except ApiError as error:
            return f"no Playground ({error})"
        return f"no pod yet; Playground conditions: {playground.get('status', {}).get('conditions')}"
    statuses = [*(pod["status"].get("initContainerStatuses") or []), *(pod["status"].get("containerStatuses") or [])]
    return "; ".join(f"{s['name']}: {json.dumps(s.get('state'))}" for s in statuses) or json.dumps(pod["status"])
