"""Inference flavors: pods request the flavor's accelerators, land only on nodes of the flavor (required node
affinity from its nodeSelector), and move to the next flavor when they cannot be placed for a fallback period."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from llmaz_dev.envtest.scheduler import kube_scheduler_with_extender
from llmaz_dev.envtest.simulated import GPU_PRODUCT_LABEL, GPU_RESOURCE

from .managers import NAMESPACE as MANAGER_NAMESPACE
from .managers import LocalManagers
from .support import (
    WORKER_INDEX_LABEL,
    Environment,
    ModelNames,
    eventually,
    open_model,
    playground,
    wait_playground_ready,
)
from .test_multihost import multi_host_service

A100 = "NVIDIA-A100-SXM4-80GB"
A10 = "NVIDIA-A10"
GLOBAL_CONFIG = "llmaz-global-config"
FLAVORS = [
    {"name": "a100", "limits": {GPU_RESOURCE: "4"}, "nodeSelector": {GPU_PRODUCT_LABEL: A100}},
    {"name": "a10", "limits": {GPU_RESOURCE: "2"}, "nodeSelector": {GPU_PRODUCT_LABEL: A10}},
]


def test_the_first_flavor_requests_four_gpus_so_pods_land_only_on_eight_gpu_nodes(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("llama")
    e2e.apply([open_model(model, family="llama3", flavors=FLAVORS), playground("big", model, replicas=2)], namespace)

    wait_playground_ready(e2e, namespace, "big", replicas=2)
    for pod in e2e.pods_of(namespace, "big"):
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"][GPU_RESOURCE] == resources["limits"][GPU_RESOURCE] == "4"
        node = e2e.get("nodes", pod["spec"]["nodeName"])
        assert node is not None
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"


def test_a_claimed_flavor_sets_the_gpu_request_and_keeps_pods_off_cpu_only_nodes(
    e2e: Environment, namespace: str, models: ModelNames
) -> None:
    model = models.new("llama")
    e2e.apply(
        [open_model(model, family="llama3", flavors=FLAVORS), playground("small", model, replicas=2, flavors=["a10"])],
        namespace,
    )

    wait_playground_ready(e2e, namespace, "small", replicas=2)
    for pod in e2e.pods_of(namespace, "small"):
        assert pod["metadata"]["annotations"]["llmaz.io/inference-service-flavors"] == "a10"
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"][GPU_RESOURCE] == resources["limits"][GPU_RESOURCE] == "2"
        node = e2e.get("nodes", pod["spec"]["nodeName"])
        assert node is not None
        assert int(node["status"]["allocatable"].get(GPU_RESOURCE, "0")) >= 2


# Flavor fallback: the first flavor asks more GPUs than an A100 node has, so its pods stay Pending
# ("Insufficient nvidia.com/gpu" on the A100 nodes, node affinity mismatch elsewhere) until the Service moves to
# the A10 flavor. The global config's fallback period is shortened for these tests and restored after.
FALLBACK_AFTER = 5
TOO_BIG_A100 = {"name": "a100", "limits": {GPU_RESOURCE: "16"}, "nodeSelector": {GPU_PRODUCT_LABEL: A100}}
A10_ONE_GPU = {"name": "a10", "limits": {GPU_RESOURCE: "1"}, "nodeSelector": {GPU_PRODUCT_LABEL: A10}}
TOO_BIG_A10 = {"name": "a10", "limits": {GPU_RESOURCE: "16"}, "nodeSelector": {GPU_PRODUCT_LABEL: A10}}


@contextlib.contextmanager
def _global_config_with(e2e: Environment, lines: str) -> Iterator[None]:
    """llmaz's global config with `lines` added, for one test; restored after."""
    config_map = e2e.must_get("configmaps", GLOBAL_CONFIG, MANAGER_NAMESPACE)
    original = config_map["data"]["config.data"]

    def patch(config: str) -> None:
        e2e.kubectl(
            "patch", "configmap", GLOBAL_CONFIG, "-n", MANAGER_NAMESPACE, "--type=merge",
            "-p", json.dumps({"data": {"config.data": config}}),
        )  # fmt: skip

    patch(f"{original.rstrip()}\n{lines}")
    try:
        yield
    finally:
        patch(original)


@pytest.fixture
def short_fallback(e2e: Environment) -> Iterator[None]:
    """`flavor-fallback-after: 5s` in llmaz's global config for one test."""
    with _global_config_with(e2e, f"flavor-fallback-after: {FALLBACK_AFTER}s\n"):
        yield


@pytest.fixture
def short_fallback_and_return(e2e: Environment) -> Iterator[None]:
    """`flavor-fallback-after: 5s` and `flavor-return-when-fits: true` for one test."""
    with _global_config_with(e2e, f"flavor-fallback-after: {FALLBACK_AFTER}s\nflavor-return-when-fits: true\n"):
        yield


def _time(text: str | None) -> datetime:
    assert text, "no timestamp"
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def _fallback_events(e2e: Environment, namespace: str, name: str) -> list[dict[str, Any]]:
    events = e2e.items("events", namespace)
    return [e for e in events if e.get("reason") == "FlavorFallback" and e["involvedObject"]["name"] == name]


def test_pods_that_do_not_fit_the_first_flavor_fall_back_to_the_next_with_its_resources(
    e2e: Environment, namespace: str, models: ModelNames, short_fallback: None
) -> None:
    model = models.new("llama")
    e2e.apply(
        [open_model(model, family="llama3", flavors=[TOO_BIG_A100, A10_ONE_GPU]), playground("fb", model)], namespace
    )

    # Pending on a100: the scheduler cannot place the pod, and says why.
    def pending() -> dict[str, Any]:
        pods = e2e.pods_of(namespace, "fb")
        scheduled = _condition(pods[0], "PodScheduled") if pods else {}
        assert scheduled.get("reason") == "Unschedulable", scheduled
        return pods[0]

    first = eventually(pending, what="the a100 pod Pending, Unschedulable")
    assert first["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "16"
    pending_since = _time(_condition(first, "PodScheduled")["lastTransitionTime"])

    # The Service moves to a10 and says so; its pods run on an A10 node with one GPU.
    wait_playground_ready(e2e, namespace, "fb", replicas=1)
    service = e2e.must_get("services.inference", "fb", namespace)
    assert service["status"]["activeFlavor"] == "a10"
    changed_at = _time(service["status"]["activeFlavorTime"])
    events = eventually(lambda: _fallback_events(e2e, namespace, "fb"), what="a FlavorFallback Event")
    assert len(events) == 1
    assert events[0]["message"].startswith(f"Moved from flavor a100 to a10: pod {first['metadata']['name']} was ")
    assert "Insufficient nvidia.com/gpu" in events[0]["message"]
    (pod,) = e2e.pods_of(namespace, "fb")
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["requests"][GPU_RESOURCE] == resources["limits"][GPU_RESOURCE] == "1"
    node = e2e.must_get("nodes", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == A10
    scheduled_at = _time(_condition(pod, "PodScheduled")["lastTransitionTime"])
    ready_at = _time(_condition(pod, "Ready")["lastTransitionTime"])

    assert changed_at - pending_since >= timedelta(seconds=FALLBACK_AFTER)
    print(
        "\nflavor fallback timeline:"
        f"\n  {pending_since:%H:%M:%S}  pod {first['metadata']['name']} Pending on a100 (Unschedulable)"
        f"\n  {changed_at:%H:%M:%S}  activeFlavor a100 -> a10 (+{(changed_at - pending_since).total_seconds():.0f}s)"
        f"; Event: {events[0]['message']}"
        f"\n  {scheduled_at:%H:%M:%S}  pod {pod['metadata']['name']} scheduled on {node['metadata']['name']} (A10)"
        f"\n  {ready_at:%H:%M:%S}  pod Ready (+{(ready_at - pending_since).total_seconds():.0f}s after Pending)"
    )


def test_when_no_flavor_fits_the_service_stays_on_the_last_and_says_so(
    e2e: Environment, namespace: str, models: ModelNames, short_fallback: None
) -> None:
    model = models.new("llama")
    e2e.apply(
        [open_model(model, family="llama3", flavors=[TOO_BIG_A100, TOO_BIG_A10]), playground("nofit", model)],
        namespace,
    )

    def no_fit() -> str:
        service = e2e.must_get("services.inference", "nofit", namespace)
        message = str(_condition(service, "Progressing").get("message"))
        assert "no inference flavor fits (tried a100, a10)" in message, message
        assert service["status"]["activeFlavor"] == "a10"
        return message

    message = eventually(no_fit, what="the Service saying no flavor fits")
    assert "Insufficient nvidia.com/gpu" in message
    playground_message = eventually(
        lambda: (
            "no inference flavor fits"
            in (m := str(_condition(e2e.must_get("playgrounds", "nofit", namespace), "Progressing").get("message")))
            and m
        ),
        what="the Playground mirroring it",
    )
    assert "tried a100, a10" in playground_message
    assert len(_fallback_events(e2e, namespace, "nofit")) == 1  # a100 -> a10, then nothing more


def test_a_multi_host_group_falls_back_whole_leader_and_workers_on_the_same_flavor(
    e2e: Environment, namespace: str, models: ModelNames, short_fallback: None
) -> None:
    model = models.new("llama")
    service = multi_host_service("mh", model)
    service["spec"]["replicas"] = 1
    e2e.apply([open_model(model, family="llama3", flavors=[TOO_BIG_A100, A10_ONE_GPU]), service], namespace)

    def running_on_a10() -> list[dict[str, Any]]:
        found = e2e.must_get("services.inference", "mh", namespace)
        assert (found.get("status") or {}).get("activeFlavor") == "a10"
        pods = e2e.ready_pods_of(namespace, "mh")
        assert len(pods) == 2 == len(e2e.pods_of(namespace, "mh")), len(pods)
        return pods

    pods = eventually(running_on_a10, what="leader and worker Ready on a10")
    roles = set()
    for pod in pods:
        roles.add(pod["metadata"]["labels"][WORKER_INDEX_LABEL])
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In", "values": [A10]}]}
        ]
        runner = next(c for c in pod["spec"]["containers"] if c["name"] == "model-runner")
        assert runner["resources"]["limits"][GPU_RESOURCE] == "1"
        node = e2e.must_get("nodes", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == A10
    assert roles == {"0", "1"}


A100_WHOLE_NODE = {"name": "a100", "limits": {GPU_RESOURCE: "8"}, "nodeSelector": {GPU_PRODUCT_LABEL: A100}}


def _blocker(name: str) -> dict[str, Any]:
    """A pod that takes all 8 GPUs of an A100 node."""
    container = {"name": "c", "image": "registry.example/blocker:v1", "resources": {"limits": {GPU_RESOURCE: "8"}}}
    spec = {"nodeSelector": {GPU_PRODUCT_LABEL: A100}, "containers": [container], "terminationGracePeriodSeconds": 0}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"e2e": "blocker"}}, "spec": spec}


def test_with_return_on_a_service_goes_back_to_its_first_flavor_once_that_has_room(
    e2e: Environment, namespace: str, models: ModelNames, short_fallback_and_return: None
) -> None:
    e2e.apply([_blocker("blocker-0"), _blocker("blocker-1")], namespace)

    def blocking() -> bool:
        pods = [p for p in e2e.items("pods", namespace) if p["metadata"]["name"].startswith("blocker-")]
        return len(pods) == 2 and all(p.get("spec", {}).get("nodeName") for p in pods)

    eventually(blocking, what="both A100 nodes taken by blocker pods")
    model = models.new("llama")
    e2e.apply([open_model(model, family="llama3", flavors=[A100_WHOLE_NODE, A10_ONE_GPU]), playground("rt", model)],
              namespace)  # fmt: skip

    def on(flavor: str, product: str) -> dict[str, Any] | None:
        service = e2e.get("services.inference", "rt", namespace)
        if service is None or (service.get("status") or {}).get("activeFlavor") != flavor:
            return None
        pods = [p for p in e2e.pods_of(namespace, "rt") if not p["metadata"].get("deletionTimestamp")]
        if len(pods) != 1 or _condition(pods[0], "Ready").get("status") != "True":
            return None
        node = e2e.must_get("nodes", pods[0]["spec"]["nodeName"])
        return service if node["metadata"]["labels"][GPU_PRODUCT_LABEL] == product else None

    fell_back = eventually(lambda: on("a10", A10), what="the Service on a10, its pod Ready on an A10 node")
    fell_back_at = _time(fell_back["status"]["activeFlavorTime"])
    e2e.kubectl("delete", "pods", "-l", "e2e=blocker", "-n", namespace, "--wait=false")

    returned = eventually(lambda: on("a100", A100), what="the Service back on a100, its pod Ready on an A100 node")
    returned_at = _time(returned["status"]["activeFlavorTime"])
    assert returned_at - fell_back_at >= timedelta(seconds=FALLBACK_AFTER)  # at most one change per period
    events = [e for e in e2e.items("events", namespace) if e.get("reason") == "FlavorReturn"]
    assert len(events) == 1, events
    assert events[0]["message"].startswith("Moved back from flavor a10 to a100: its nodes have room for ")
    (pod,) = [p for p in e2e.pods_of(namespace, "rt") if not p["metadata"].get("deletionTimestamp")]
    assert pod["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "8"
    print(
        "\nflavor return timeline:"
        f"\n  {fell_back_at:%H:%M:%S}  activeFlavor a100 -> a10 (A100 nodes full)"
        f"\n  {returned_at:%H:%M:%S}  activeFlavor a10 -> a100; Event: {events[0]['message']}"
    )


def test_a_second_kube_scheduler_with_the_manager_s_extender_places_model_pods_by_flavor(
    e2e: Environment, namespace: str, models: ModelNames, tmp_path: Path
) -> None:
    assert isinstance(e2e.manager, LocalManagers)
    scheduler = f"llmaz-{namespace.rsplit('-', 1)[-1]}"
    model = models.new("llama")
    # The extender is not ignorable: a pod that this scheduler places was filtered and scored by it.
    with (
        kube_scheduler_with_extender(e2e.cluster, scheduler, e2e.manager.extender_url(), tmp_path / "scheduler"),
        _global_config_with(e2e, f"scheduler-name: {scheduler}\n"),
    ):
        e2e.apply([open_model(model, family="llama3", flavors=FLAVORS), playground("ext", model)], namespace)
        wait_playground_ready(e2e, namespace, "ext", replicas=1)
    (pod,) = e2e.pods_of(namespace, "ext")
    assert pod["spec"]["schedulerName"] == scheduler
    node = e2e.must_get("nodes", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == A100
    scheduled = [e for e in e2e.items("events", namespace) if e.get("reason") == "Scheduled"]
    reporters = {e.get("reportingComponent") or (e.get("source") or {}).get("component") for e in scheduled}
    assert reporters == {scheduler}, scheduled
