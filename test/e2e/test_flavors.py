"""Inference flavors: pods request the flavor's accelerators and land only on nodes that have them."""

from __future__ import annotations

from llmaz.envtest.simulated import GPU_PRODUCT_LABEL, GPU_RESOURCE

from .support import Environment, ModelNames, open_model, playground, wait_playground_ready

FLAVORS = [
    {"name": "a100", "limits": {GPU_RESOURCE: "4"}, "nodeSelector": {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}},
    {"name": "a10", "limits": {GPU_RESOURCE: "2"}, "nodeSelector": {GPU_PRODUCT_LABEL: "NVIDIA-A10"}},
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
