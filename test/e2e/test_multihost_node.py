"""A model split over a group of two pods with llama.cpp's RPC backend, on the real node.

config/samples/multi-host-llamacpp.yaml as users apply it (its OpenModel renamed per test, its leader's alias with
it): an inference Service of size 2 whose worker runs `rpc-server` and whose leader runs `llama-server --rpc`
with the worker's address, resolved from its LeaderWorkerSet DNS name. The group answers through `<name>-lb` and
through llmaz-gateway; deleting the worker recreates the whole group (RecreateGroupOnPodRestart), which answers
again, with the timeline printed. TTFT and tokens/s of the group against a group of one (the same sample with
size 1, llama-server alone) are printed: on one machine the split costs, the point is that the path works. A
worker whose image never comes is named, with the reason, in the Service's `Progressing` condition.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest.objectstore import ObjectStore

from .conftest import REPO
from .serving import assert_completion, credentials, first_answer, gateway_chat, lb_url, routable
from .support import (
    WORKER_INDEX_LABEL,
    Environment,
    ModelNames,
    chat_request,
    conditions,
    eventually,
    pod_ready,
)

pytestmark = pytest.mark.tier("node")
SAMPLE = REPO / "config" / "samples" / "multi-host-llamacpp.yaml"
SAMPLE_MODEL = "tiny-llama-multihost"
# The model loader, llama.cpp's start and the RPC handshake take seconds; a recreated group does it all again.
GROUP_WAIT = 180.0
MEASURED_REQUESTS = 5
MEASURED_TOKENS = 32


def sample(store: ObjectStore, model: str, name: str, size: int = 2, worker_image: str | None = None) -> list[Any]:
    """The sample's OpenModel named `model` and its Service named `name` of `size`, serving `model`."""
    documents = [doc for doc in yaml.safe_load_all(SAMPLE.read_text()) if doc]
    (open_model,) = [doc for doc in documents if doc["kind"] == "OpenModel"]
    (service,) = [doc for doc in documents if doc["kind"] == "Service"]
    open_model["metadata"]["name"] = model
    service["metadata"]["name"] = name
    service["spec"]["modelClaims"]["models"] = [{"name": model}]
    workload = service["spec"]["workloadTemplate"]
    workload["size"] = size
    (leader,) = workload["leaderTemplate"]["spec"]["containers"]
    (worker,) = workload["workerTemplate"]["spec"]["containers"]
    for container in (leader, worker):
        assert {"name": "AWS_ENDPOINT_URL", "value": store.url} in container["env"], "the sample names the node's store"
    script = leader["command"][2]
    assert script.count(f"--alias {SAMPLE_MODEL} ") == 1, "the leader serves the sample's model under its name"
    leader["command"][2] = script.replace(f"--alias {SAMPLE_MODEL} ", f"--alias {model} ")
    if worker_image is not None:
        worker["image"] = worker_image
        worker["imagePullPolicy"] = "Never"
    return [open_model, service]


@dataclass(frozen=True)
class Group:
    leader: dict[str, Any]
    workers: list[dict[str, Any]]


def ready_group(e2e: Environment, namespace: str, name: str, size: int) -> Group:
    """Wait until Service `name` is Available with one Ready group of `size` pods; that group."""

    def ready() -> Group:
        service = e2e.get("services.inference", name, namespace)
        assert conditions(service).get("Available") == ("True", "ServiceReady"), conditions(service)
        pods = e2e.pods_of(namespace, name)
        assert len(pods) == size, [p["metadata"]["name"] for p in pods]
        assert all(pod_ready(p) for p in pods), [p["metadata"]["name"] for p in pods if not pod_ready(p)]
        (leader,) = [p for p in pods if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"]
        return Group(leader, [p for p in pods if p is not leader])

    return eventually(ready, within=GROUP_WAIT, what=f"Service {namespace}/{name} Available with {size} Ready pods")


def hex_address(ip: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (the bytes of the address in host order, x86's little-endian)."""
    return "".join(f"{int(octet):02X}" for octet in reversed(ip.split(".")))


def pod_log(e2e: Environment, namespace: str, pod: dict[str, Any]) -> str:
    return e2e.kubectl("logs", pod["metadata"]["name"], "-n", namespace, "-c", "model-runner")


@dataclass(frozen=True)
class Figures:
    ttft_ms: float
    tokens_per_second: float


def streamed(url: str, model: str, index: int) -> Figures:
    """One streamed chat of MEASURED_TOKENS: the time to its first content chunk, and decode tokens/s after it.
    Each `index` is another prompt, so no request starts from the one before's cached prompt."""
    content = f"Tell me about the sea, part {index}"
    body = chat_request(model, content, stream=True, max_tokens=MEASURED_TOKENS)
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    start = time.monotonic()
    first = end = None
    tokens = 0
    with opener.open(request, timeout=60) as response:
        for line in response:
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            chunk = json.loads(line[5:])
            if first is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices") or []):
                first = time.monotonic()
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                end = time.monotonic()
    assert first is not None, "no content chunk"
    assert end is not None, "no usage chunk"
    assert tokens > 1, tokens
    return Figures((first - start) * 1000, (tokens - 1) / (end - first))


def measured(url: str, model: str) -> Figures:
    runs = [streamed(url, model, index) for index in range(MEASURED_REQUESTS)]
    return Figures(statistics.median(r.ttft_ms for r in runs), statistics.median(r.tokens_per_second for r in runs))


def test_a_two_pod_llama_cpp_group_answers_through_lb_and_the_gateway_and_is_recreated_when_its_worker_dies(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model, single = models.new("multihost"), models.new("single")
    e2e.apply([credentials()], namespace)
    e2e.apply(sample(object_store, model, "group"), namespace)
    group = ready_group(e2e, namespace, "group", size=2)
    (worker,) = group.workers
    assert worker["metadata"]["name"] == "group-0-1"

    # The leader found its worker by its LeaderWorkerSet DNS name and runs llama-server with its address.
    leader_log = pod_log(e2e, namespace, group.leader)
    found = f"worker group-0-1.group.{namespace} is {worker['status']['podIP']}, accepting on port 50052"
    assert found in leader_log, leader_log[-2000:]
    # llama-server holds a connection to rpc-server for as long as it serves (nothing else connects: the worker's
    # readiness probe reads the socket table).
    leader_ip = group.leader["status"]["podIP"]
    sockets = e2e.kubectl("exec", "group-0-1", "-n", namespace, "-c", "model-runner", "--", "cat", "/proc/net/tcp")
    established = re.compile(rf":C384 {hex_address(leader_ip)}:[0-9A-F]{{4}} 01 ")  # 01: ESTABLISHED
    assert established.search(sockets), sockets

    url = lb_url(e2e, namespace, "group")
    first_answer(url, model)
    routable(e2e, model)
    assert_completion(*gateway_chat(e2e, model), model)

    # Kill the worker: the whole group is recreated (a new leader pod), becomes Ready and answers again.
    old_leader_uid = group.leader["metadata"]["uid"]
    deleted = time.monotonic()
    e2e.kubectl("delete", "pod", "group-0-1", "-n", namespace, "--wait=false")

    def leader_recreated() -> bool:
        leaders = [p for p in e2e.pods_of(namespace, "group") if p["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"]
        return bool(leaders) and leaders[0]["metadata"]["uid"] != old_leader_uid

    eventually(leader_recreated, within=GROUP_WAIT, what="a new leader pod")
    recreated = time.monotonic()
    regrouped = ready_group(e2e, namespace, "group", size=2)
    ready = time.monotonic()
    first_answer(url, model)
    answered = time.monotonic()
    events = [
        e["message"]
        for e in e2e.items("events", namespace)
        if e.get("reason") == "RecreateGroupOnPodRestart" and e["involvedObject"].get("name") == "group"
    ]
    print(
        "\nworker group-0-1 deleted at 0.0 s"
        f"\ngroup recreated (leader uid {old_leader_uid[:8]} -> {regrouped.leader['metadata']['uid'][:8]}) at "
        f"{recreated - deleted:.1f} s"
        f"\nleader and worker Ready, Service Available at {ready - deleted:.1f} s"
        f"\nanswering through group-lb again at {answered - deleted:.1f} s"
        f"\nLeaderWorkerSet events: {events}"
    )
    assert regrouped.leader["metadata"]["uid"] != old_leader_uid
    assert events, "LeaderWorkerSet recorded no RecreateGroupOnPodRestart Event"

    # The same sample with size 1: llama-server alone, for comparison.
    e2e.apply(sample(object_store, single, "single", size=1), namespace)
    ready_group(e2e, namespace, "single", size=1)
    single_url = lb_url(e2e, namespace, "single")
    first_answer(single_url, single)
    alone, split = measured(single_url, single), measured(url, model)
    print(
        f"\n{MEASURED_REQUESTS} streamed chats of {MEASURED_TOKENS} tokens each, medians:"
        f"\nsize 1 (llama-server alone):      TTFT {alone.ttft_ms:.1f} ms, {alone.tokens_per_second:.0f} tokens/s"
        f"\nsize 2 (leader + rpc-server):     TTFT {split.ttft_ms:.1f} ms, {split.tokens_per_second:.0f} tokens/s"
    )


def test_a_worker_that_never_comes_up_is_named_with_its_reason_in_the_services_condition(
    e2e: Environment, namespace: str, models: ModelNames, object_store: ObjectStore
) -> None:
    model = models.new("stuck")
    image = "llmaz.local/no-such-rpc-server:dev"
    e2e.apply([credentials()], namespace)
    e2e.apply(sample(object_store, model, "stuck", worker_image=image), namespace)

    prefix = "Inference Service is progressing: ImagePullFailed: worker pod stuck-0-1, container model-runner: "

    def named() -> str:
        service = e2e.get("services.inference", "stuck", namespace)
        found = ((service or {}).get("status") or {}).get("conditions") or []
        progressing: dict[str, Any] = next((c for c in found if c["type"] == "Progressing"), {})
        assert progressing.get("status") == "True", found
        message = str(progressing.get("message") or "")
        # Waited for, not taken at first sight: kubelet may report a passing finding for the worker first (its
        # secret cache not synced yet, say), which the next pod status replaces.
        assert message.startswith(prefix), found
        return message

    message = eventually(named, within=GROUP_WAIT, what="the worker pod's image pull failure named in Progressing")
    print(f"\nProgressing: {message}")
    assert image in message, message

    # No half-ready group: the leader waits for its worker (and says so), so nothing is Ready or Available.
    def leader_waiting() -> bool:
        leader = e2e.get("pods", "stuck-0", namespace)
        if leader is None or not any("running" in s["state"] for s in leader["status"].get("containerStatuses") or []):
            return False
        return f"waiting for worker stuck-0-1.stuck.{namespace} " in pod_log(e2e, namespace, leader)

    eventually(leader_waiting, within=GROUP_WAIT, what="the leader waiting for its worker")
    service = e2e.must_get("services.inference", "stuck", namespace)
    assert conditions(service).get("Available", ("False", None))[0] != "True", conditions(service)
    assert not e2e.ready_pods_of(namespace, "stuck")
