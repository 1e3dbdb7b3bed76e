"""A model really served: Playground -> Service -> LeaderWorkerSet -> pod -> model loader -> llama.cpp -> answer.

On the node tier only. The model is the tiny random-weight llama (`llmaz_dev.tinymodel`): its text is
meaningless, every step of the path to it is real. It is uploaded to the node's S3-compatible object store, and
each Playground loads it with the project's model-loader image (the node overlay's `init-container-image`), with
credentials from a Secret and the endpoint from the loader's documented `AWS_ENDPOINT_URL`.
"""

from __future__ import annotations

import json
import selectors
import subprocess
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.envtest.objectstore import ObjectStore, tiny_model

from .serving import (
    BUCKET,
    KEY,
    assert_completion,
    chat,
    credentials,
    first_answer,
    lb_url,
    node_of,
    serve_chat,
    served,
    tiny_llama,
)
from .support import (
    Environment,
    ModelNames,
    chat_request,
    conditions,
    eventually,
    http_request,
    manager_image,
    pod_ready,
    run_python_pod,
    sse_events,
    wait_playground_ready,
)

pytestmark = pytest.mark.tier("node")
HOST_MODEL_DIR = "models"
PORT_FORWARD_TIMEOUT = 30.0


def test_a_playground_loads_its_model_from_s3_and_answers_chat_completions(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    found = e2e.must_get("playgrounds", "chat", namespace)
    assert conditions(found)["Available"] == ("True", "PlaygroundReady")

    (pod,) = e2e.ready_pods_of(namespace, "chat")
    (loader,) = pod["status"]["initContainerStatuses"]
    assert loader["state"]["terminated"]["exitCode"] == 0, loader
    assert loader["image"].startswith("llmaz.local/model-loader:"), loader["image"]
    log = e2e.kubectl("logs", pod["metadata"]["name"], "-n", namespace, "-c", loader["name"])
    assert '"event": "load.complete"' in log or '"event":"load.complete"' in log, log[-2000:]

    url = lb_url(e2e, namespace, "chat")
    first_answer(url, model)

    status, listing = http_request(f"{url}/v1/models")
    assert status == 200
    assert [entry["id"] for entry in json.loads(listing)["data"]] == [model]

    status, body = chat(url, model, stream=True)
    events = sse_events(body)
    assert status == 200
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len(chunks) >= 3, chunks  # role, at least one token, usage: sent as separate events
    assert chunks[-1]["usage"]["completion_tokens"] > 0, chunks[-1]


def test_the_lb_service_answers_from_a_pod_and_through_port_forward(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    first_answer(lb_url(e2e, namespace, "chat"), model)

    script = f"""
import json, urllib.request
body = {chat_request(model)!r}
request = urllib.request.Request("http://chat-lb:8080/v1/chat/completions", data=body,
                                 headers={{"Content-Type": "application/json"}})
print(json.dumps(json.load(urllib.request.urlopen(request, timeout=30))))
"""
    answer = json.loads(run_python_pod(e2e, namespace, "client", script))
    assert answer["usage"]["completion_tokens"] > 0, answer

    with port_forward(e2e, namespace, "service/chat-lb", 8080) as local_port:
        assert_completion(*chat(f"http://127.0.0.1:{local_port}", model), model)


def test_scaling_a_playground_to_two_gives_two_serving_pods_behind_the_lb_service(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)

    e2e.kubectl("scale", "playground", "chat", "-n", namespace, "--replicas=2")
    wait_playground_ready(e2e, namespace, "chat", replicas=2)
    for pod in e2e.ready_pods_of(namespace, "chat"):
        assert_completion(*chat(f"http://{pod['status']['podIP']}:8080", model), model)

    def both_behind_the_service() -> bool:
        slices = e2e.items("endpointslices", namespace, "kubernetes.io/service-name=chat-lb")
        ready = [e for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")]
        return len(ready) == 2

    eventually(both_behind_the_service, what="two ready endpoints behind chat-lb")
    url = lb_url(e2e, namespace, "chat")
    for _ in range(6):
        assert_completion(*chat(url, model), model)


def test_a_killed_engine_restarts_and_the_playground_goes_unavailable_then_available(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = serve_chat(e2e, namespace, models, object_store)
    (pod,) = e2e.ready_pods_of(namespace, "chat")
    (engine,) = pod["status"]["containerStatuses"]
    first_answer(lb_url(e2e, namespace, "chat"), model)

    node_of(e2e).kill_container(engine["containerID"])

    eventually(
        lambda: conditions(e2e.get("playgrounds", "chat", namespace)).get("Available", ("",))[0] == "False",
        what="Available=False while the engine is down",
    )
    found = wait_playground_ready(e2e, namespace, "chat", replicas=1)
    (after,) = e2e.ready_pods_of(namespace, "chat")
    # The group's restart policy (RecreateGroupOnPodRestart by default) recreates the pod; without it the
    # container restarts in place.
    restarted = (
        after["metadata"]["uid"] != pod["metadata"]["uid"]
        or after["status"]["containerStatuses"][0]["restartCount"] == 1
    )
    assert restarted, after["status"]
    assert conditions(found)["Available"][0] == "True"
    first_answer(lb_url(e2e, namespace, "chat"), model)


def test_a_model_on_the_node_is_served_from_a_host_path(e2e: Environment, namespace: str, models: ModelNames) -> None:
    node = node_of(e2e)
    directory = node.layout.root / HOST_MODEL_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny-llama.gguf"
    path.write_bytes(tiny_model().read_bytes())
    model = models.new("tiny-host")
    e2e.apply([tiny_llama(model, f"host://{path}"), served("chat", model, None)], namespace)
    wait_playground_ready(e2e, namespace, "chat", replicas=1)
    (pod,) = e2e.ready_pods_of(namespace, "chat")
    assert not pod["spec"].get("initContainers"), "a host path needs no loader"
    first_answer(lb_url(e2e, namespace, "chat"), model)


def test_a_multi_host_service_starts_leader_and_worker_and_the_worker_finds_the_leader(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("tiny")
    e2e.apply([credentials()], namespace)
    image = manager_image(e2e)
    worker = {
        "name": "model-runner",
        "image": image,
        "command": [
            "python",
            "-c",
            "import os, socket, http.server; "
            "print('leader', os.environ['LWS_LEADER_ADDRESS'], socket.gethostbyname(os.environ['LWS_LEADER_ADDRESS']),"
            " flush=True); "
            "http.server.HTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()",
        ],
        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
    }
    leader = {
        "name": "model-runner",
        "image": "llmaz.local/llama-server:dev",
        "command": ["./llama-server"],
        "args": ["-m", "/workspace/models/tiny-llama.gguf", "--alias", model, "--host", "0.0.0.0", "--port", "8080"],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 2},
        "ports": [{"name": "http", "containerPort": 8080}],
    }
    service = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Service",
        "metadata": {"name": "multi"},
        "spec": {
            "modelClaims": {"models": [{"name": model}]},
            "replicas": 1,
            "workloadTemplate": {
                "size": 2,
                "leaderTemplate": {
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{**leader, "env": [{"name": "AWS_ENDPOINT_URL", "value": object_store.url}]}],
                    }
                },
                "workerTemplate": {
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{**worker, "env": [{"name": "AWS_ENDPOINT_URL", "value": object_store.url}]}],
                    }
                },
            },
        },
    }
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{KEY}"), service], namespace)

    def both_ready() -> list[dict[str, Any]]:
        pods = e2e.pods_of(namespace, "multi")
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        assert all(pod_ready(p) for p in pods)
        return pods

    pods = eventually(both_ready, within=120, what="leader and worker Ready")
    worker_pod = next(p for p in pods if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1")
    leader_pod = next(p for p in pods if p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0")
    line = e2e.kubectl("logs", worker_pod["metadata"]["name"], "-n", namespace, "-c", "model-runner").split("\n")[0]
    _, address, ip = line.split()
    assert address.startswith("multi-0."), line
    assert ip == leader_pod["status"]["podIP"], (line, leader_pod["status"]["podIP"])
    first_answer(lb_url(e2e, namespace, "multi"), model)


def test_deleting_a_playground_removes_everything_it_made(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    serve_chat(e2e, namespace, models, object_store)

    e2e.kubectl("delete", "playground", "chat", "-n", namespace, "--wait=false")

    def all_gone() -> bool:
        left = [
            collection
            for collection, name in (
                ("services.inference", "chat"),
                ("leaderworkersets", "chat"),
                ("services", "chat-lb"),
                ("statefulsets", "chat"),
            )
            if e2e.get(collection, name, namespace) is not None
        ]
        assert not left, left
        assert not e2e.items("pods", namespace, "leaderworkerset.sigs.k8s.io/name=chat")
        return True

    eventually(all_gone, within=120, what="the garbage collector to remove what the Playground made")


class port_forward:  # noqa: N801 - used as a context manager, like contextlib's
    """`kubectl port-forward` of `target`'s `port` to a free local port, for the `with` block."""

    def __init__(self, e2e: Environment, namespace: str, target: str, port: int) -> None:
        cluster = e2e.cluster
        argv = [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "port-forward", "-n", namespace]
        self._argv = [*argv, "--address=127.0.0.1", target, f":{port}"]
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> int:
        self._process = subprocess.Popen(self._argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self._process.stdout is not None
        # "Forwarding from 127.0.0.1:43121 -> 8080": the first line says which local port was chosen.
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            assert selector.select(timeout=PORT_FORWARD_TIMEOUT), "kubectl port-forward said nothing"
        first = self._process.stdout.readline()
        assert first.startswith("Forwarding from 127.0.0.1:"), first
        return int(first.split(":", 2)[1].split()[0])

    def __exit__(self, *_exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)


def test_a_missing_object_is_reported_and_the_pod_recovers_once_it_is_uploaded(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("tiny-late")
    key = f"late/{namespace}/tiny-llama.gguf"
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{key}"), served("chat", model, object_store)], namespace)

    def loader_failed() -> dict[str, Any]:
        pods = e2e.pods_of(namespace, "chat")
        assert len(pods) == 1, "no pod yet"
        statuses = pods[0]["status"].get("initContainerStatuses") or []
        assert len(statuses) == 1, statuses
        loader = statuses[0]
        terminated = (loader.get("state") or {}).get("terminated") or (loader.get("lastState") or {}).get("terminated")
        assert terminated, loader
        return dict(terminated)

    terminated = eventually(loader_failed, what="the model loader to fail")
    assert terminated["exitCode"] == 3, terminated  # not found
    assert "\n" not in terminated["message"].strip(), terminated["message"]
    assert key in terminated["message"], terminated["message"]

    def reported() -> str:
        progressing = next(
            c
            for c in e2e.must_get("playgrounds", "chat", namespace)["status"]["conditions"]
            if c["type"] == "Progressing"
        )
        assert "ModelLoaderFailed" in progressing["message"], progressing
        return str(progressing["message"])

    message = eventually(reported, what="the loader's failure in the Playground's Progressing condition")
    assert key in message, message
    events = e2e.items("events", namespace)
    warnings = [
        event
        for event in events
        if event["reason"] == "ModelLoaderFailed" and event["involvedObject"]["kind"] == "Playground"
    ]
    assert warnings, [(event["reason"], event["message"]) for event in events]
    assert warnings[0]["type"] == "Warning"

    object_store.upload(BUCKET, key, tiny_model())
    # kubelet retries the init container with its back-off; nothing is deleted by hand.
    wait_playground_ready_within(e2e, namespace, "chat", within=180)
    first_answer(lb_url(e2e, namespace, "chat"), model)
    progressing = next(
        c for c in e2e.must_get("playgrounds", "chat", namespace)["status"]["conditions"] if c["type"] == "Progressing"
    )
    assert "ModelLoaderFailed" not in progressing["message"], progressing


def wait_playground_ready_within(e2e: Environment, namespace: str, name: str, within: float) -> None:
    def ready() -> bool:
        found = e2e.get("playgrounds", name, namespace)
        assert conditions(found).get("Available") == ("True", "PlaygroundReady"), conditions(found)
        return True

    eventually(ready, within=within, what=f"Playground {namespace}/{name} Available")


def test_a_corrupt_model_file_is_reported_as_the_engine_failing(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + bytes(range(256)) * 64)  # the magic, then nonsense
    key = f"corrupt/{namespace}/corrupt.gguf"
    object_store.upload(BUCKET, key, corrupt)
    model = models.new("tiny-corrupt")
    e2e.apply([credentials()], namespace)
    e2e.apply([tiny_llama(model, f"s3://{BUCKET}/{key}"), served("chat", model, object_store)], namespace)

    def reported() -> str:
        playground = e2e.must_get("playgrounds", "chat", namespace)
        progressing = next(c for c in playground["status"]["conditions"] if c["type"] == "Progressing")
        assert "ContainerCrashLooping" in progressing["message"], progressing
        return str(progressing["message"])

    message = eventually(reported, within=120, what="the engine's failure in the Playground's Progressing condition")
    assert "model-runner" in message, message
    assert "exited with code" in message, message
    assert conditions(e2e.get("playgrounds", "chat", namespace)).get("Available", ("False",))[0] != "True"
