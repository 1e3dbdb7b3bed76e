"""What the e2e tests share: the environment handle, polling, object paths and manifest builders.

Reads go straight to the REST API (fast; no kubectl process per poll); changes go through kubectl, as a user's
would. Waits poll every 0.25 s up to `WAIT` seconds (multiplied by `E2E_TIMEOUT_SCALE`, for slower clusters).
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import yaml

from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._rest import ApiError
from llmaz_dev.testing.waiting import eventually_sync

from .managers import Manager

T = TypeVar("T")
WAIT = 60.0 * float(os.environ.get("E2E_TIMEOUT_SCALE", "1"))
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
REAL_NODE_TIERS = ("node", "migration")

_COLLECTIONS = {
    "playgrounds": "/apis/inference.llmaz.io/v1alpha1/namespaces/{ns}/playgrounds",
    "services.inference": "/apis/inference.llmaz.io/v1alpha1/namespaces/{ns}/services",
    "leaderworkersets": "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
    "statefulsets": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "pods": "/api/v1/namespaces/{ns}/pods",
    "services": "/api/v1/namespaces/{ns}/services",
    "endpointslices": "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
    "hpas": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "events": "/api/v1/namespaces/{ns}/events",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "networkpolicies": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "nodes": "/api/v1/nodes",
    "openmodels": "/apis/llmaz.io/v1alpha1/openmodels",
    "backendruntimes": "/apis/inference.llmaz.io/v1alpha1/backendruntimes",
    "leases": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    "controllerrevisions": "/apis/apps/v1/namespaces/{ns}/controllerrevisions",
}


def eventually(check: Callable[[], T | Literal[False] | None], within: float = WAIT, what: str = "condition") -> T:
    """`llmaz_dev.testing.waiting.eventually_sync` with the e2e default wait (scaled by E2E_TIMEOUT_SCALE)."""
    return eventually_sync(check, within, what, interval=0.25)


@dataclass
class Environment:
    """The cluster under test, the llmaz manager running on it, and how it was set up."""

    cluster: Cluster
    manager: Manager
    mode: str

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl(*args, input=input)

    def apply(self, documents: Sequence[Mapping[str, Any]], namespace: str | None = None) -> str:
        scope = ["-n", namespace] if namespace else []
        return self.kubectl("apply", "--server-side", *scope, "-f", "-", input=yaml.safe_dump_all(list(documents)))

    def get(self, collection: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        try:
            found: dict[str, Any] = self.cluster.admin_client().request("GET", f"{_path(collection, namespace)}/{name}")
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def must_get(self, collection: str, name: str, namespace: str = "") -> dict[str, Any]:
        found = self.get(collection, name, namespace)
        assert found is not None, f"{collection} {namespace}/{name} does not exist"
        return found

    def items(self, collection: str, namespace: str = "", selector: str = "") -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        items: list[dict[str, Any]] = self.cluster.admin_client().request(
            "GET", _path(collection, namespace), query=query
        )["items"]
        return items

    def exists(self, path: str) -> bool:
        try:
            self.cluster.admin_client().request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def pods_of(self, namespace: str, lws_name: str) -> list[dict[str, Any]]:
        """Pods of one LeaderWorkerSet (of one Playground/Service) that are not being deleted."""
        pods = self.items("pods", namespace, f"{LWS_NAME_LABEL}={lws_name}")
        return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]

    def ready_pods_of(self, namespace: str, lws_name: str) -> list[dict[str, Any]]:
        return [pod for pod in self.pods_of(namespace, lws_name) if pod_ready(pod)]


class ModelNames:
    """OpenModels are cluster-scoped: each test names its models `<stem>-<its namespace's random suffix>`."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.issued: list[str] = []

    def new(self, stem: str) -> str:
        name = f"{stem}-{self.suffix}"
        self.issued.append(name)
        return name


def _path(collection: str, namespace: str) -> str:
    return _COLLECTIONS[collection].format(ns=namespace)


def conditions(obj: Mapping[str, Any] | None) -> dict[str, tuple[str, str | None]]:
    """type -> (status, reason) of the object's status conditions."""
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c["type"]: (c["status"], c.get("reason")) for c in found}


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return conditions(pod).get("Ready", ("False", None))[0] == "True"


def open_model(
    name: str,
    *,
    family: str = "opt",
    model_id: str = "facebook/opt-125m",
    uri: str | None = None,
    flavors: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    source: dict[str, Any] = {"uri": uri} if uri else {"modelHub": {"modelID": model_id}}
    spec: dict[str, Any] = {"familyName": family, "source": source}
    if flavors:
        spec["inferenceConfig"] = {"flavors": [dict(f) for f in flavors]}
    return {"apiVersion": "llmaz.io/v1alpha1", "kind": "OpenModel", "metadata": {"name": name}, "spec": spec}


def playground(
    name: str,
    model: str | None = None,
    *,
    replicas: int = 1,
    backend: str | None = None,
    claims: Sequence[tuple[str, str]] = (),
    flavors: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    elastic: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Playground claiming `model` (modelClaim) or `claims` ((name, role) pairs, modelClaims)."""
    spec: dict[str, Any] = {"replicas": replicas}
    if claims:
        spec["modelClaims"] = {"models": [{"name": n, "role": r} for n, r in claims]}
    else:
        spec["modelClaim"] = {"modelName": model, **({"inferenceFlavors": list(flavors)} if flavors else {})}
    if backend:
        spec["backendRuntimeConfig"] = {"backendName": backend}
    if elastic is not None:
        spec["elasticConfig"] = dict(elastic)
    metadata: dict[str, Any] = {"name": name, **({"annotations": dict(annotations)} if annotations else {})}
    return {"apiVersion": "inference.llmaz.io/v1alpha1", "kind": "Playground", "metadata": metadata, "spec": spec}


def wait_playground_ready(env: Environment, namespace: str, name: str, replicas: int, size: int = 1) -> dict[str, Any]:
    """Wait until the Playground is Available=True/PlaygroundReady, reports `replicas` in its status, and has exactly
    `replicas * size` pods, all Ready."""

    def ready() -> dict[str, Any]:
        found = env.get("playgrounds", name, namespace)
        assert found is not None
        assert conditions(found).get("Available") == ("True", "PlaygroundReady"), conditions(found)
        assert found["status"].get("replicas") == replicas, found["status"]
        ready_pods = env.ready_pods_of(namespace, name)
        assert len(ready_pods) == replicas * size == len(env.pods_of(namespace, name)), len(ready_pods)
        return found

    return eventually(ready, what=f"Playground {namespace}/{name} Ready with {replicas}x{size} Ready pods")


def http_request(
    url: str,
    *,
    method: str = "GET",
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, bytes]:
    """One HTTP(S) request from this host to a pod or ClusterIP of the node; (status, body), any status.

    TLS is not verified: the servers here present self-signed certificates, and what is tested is who may get
    through, not whose certificate it is. No proxy from the environment ever sees this traffic.
    """
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def chat_request(model: str, content: str = "Hello", *, stream: bool = False, max_tokens: int = 8) -> bytes:
    """An OpenAI chat completion request body; `max_tokens` always, since random weights rarely end on their own."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def sse_events(body: bytes) -> list[str]:
    """The `data:` payloads of a server-sent-events body, in order."""
    return [line[len("data: ") :] for line in body.decode().splitlines() if line.startswith("data: ")]


def manager_image(e2e: Environment) -> str:
    """The image the installed manager runs (it has Python: test pods use it for scripted clients)."""
    pods = e2e.items("pods", "llmaz-system", "control-plane=controller-manager")
    image: str = pods[0]["spec"]["containers"][0]["image"]
    return image


def run_python_pod(e2e: Environment, namespace: str, name: str, script: str) -> str:
    """Run `python -c script` to completion in a pod from the manager's image; return its log."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": manager_image(e2e), "command": ["python", "-c", script]}],
        },
    }
    e2e.apply([pod], namespace)

    def finished() -> str | None:
        phase = e2e.must_get("pods", name, namespace)["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = eventually(finished, what=f"pod {namespace}/{name} to finish")
    log = e2e.kubectl("logs", name, "-n", namespace)
    assert phase == "Succeeded", log
    return log


@dataclass
class SteadyCreates:
    """What `creating_openmodels_steadily` saw: how many creates it sent, and each failure's first 1,000 characters."""

    created: int = 0
    failures: list[str] = field(default_factory=list)

    def assert_none_failed(self, at_least: int = 20) -> None:
        assert self.created >= at_least, f"only {self.created} creates were sent"
        assert self.failures == [], f"{len(self.failures)} of {self.created} creates failed: {self.failures[:3]}"


@contextlib.contextmanager
def fresh_namespace(e2e: Environment, hint: str) -> Iterator[str]:
    """A fresh namespace named after `hint`, ready for pods (its ServiceAccount exists), whose pods go to the
    simulated nodes except on the real node's tiers; deleted afterwards."""
    name = e2e.cluster.create_namespace(hint)
    try:
        if e2e.mode not in REAL_NODE_TIERS:
            e2e.cluster.kubectl("annotate", "namespace", name, f"{NODE_SELECTOR_ANNOTATION}=type=kwok")
        eventually(lambda: e2e.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), what="its ServiceAccount")
        yield name
    finally:
        e2e.cluster.delete_namespace(name)


@contextlib.contextmanager
def creating_openmodels_steadily(e2e: Environment, name_prefix: str, every: float = 0.1) -> Iterator[SteadyCreates]:
    """Create OpenModels one at a time, `every` seconds apart (at most 2,000), from a thread while the block runs,
    as users' writes go on through an upgrade; every create passes admission. The models are deleted afterwards."""
    client = e2e.cluster.admin_client()
    seen = SteadyCreates()
    label = {"e2e-steady-creates": name_prefix}
    stop = threading.Event()

    def create_steadily() -> None:
        while not stop.is_set() and seen.created < 2000:
            model = open_model(f"{name_prefix}-{seen.created}")
            model["metadata"]["labels"] = label
            try:
                client.request("POST", "/apis/llmaz.io/v1alpha1/openmodels", model)
            except (ApiError, OSError) as error:
                seen.failures.append(str(error)[:1000])
            seen.created += 1
            stop.wait(every)

    writer = threading.Thread(target=create_steadily, name="creates", daemon=True)
    writer.start()
    try:
        yield seen
    finally:
        stop.set()
        writer.join(timeout=30)
        e2e.kubectl("delete", "openmodels", "-l", f"e2e-steady-creates={name_prefix}", "--wait=false")
