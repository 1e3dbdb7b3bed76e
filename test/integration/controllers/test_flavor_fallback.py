"""Flavor fallback against a real API server: a pod written Unschedulable (as the scheduler would) moves the
Service to its next flavor after `flavor-fallback-after`, then, still unschedulable, to "no flavor fits" — with
no pod event in between: the requeue after the remaining time is what brings the second decision.

With `flavor-return-when-fits`, the Service moves back to the best flavor whose nodes (API objects only, no kubelet)
have room, counted from the Nodes and the pods bound to them as the manager caches them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground
from .test_pod_failures import SERVICE_ACCOUNTS, _pod, _unschedulable, _write_pod_status

INSUFFICIENT = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


@contextlib.asynccontextmanager
async def _global_config_with(client: Client, extra: str) -> AsyncIterator[None]:
    config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
    original = config["data"]["config.data"]
    config["data"]["config.data"] = original.rstrip() + "\n" + extra
    await client.update(r.CONFIG_MAPS, config)
    try:
        yield
    finally:
        config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
        config["data"]["config.data"] = original
        await client.update(r.CONFIG_MAPS, config)


@pytest_asyncio.fixture
async def short_fallback(client: Client) -> AsyncIterator[None]:
    async with _global_config_with(client, "flavor-fallback-after: 2s\n"):
        yield


@pytest_asyncio.fixture
async def short_fallback_and_return(client: Client) -> AsyncIterator[None]:
    async with _global_config_with(client, "flavor-fallback-after: 2s\nflavor-return-when-fits: true\n"):
        yield


async def _gpus(client: Client, namespace: str) -> str | None:
    lws = await get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace)
    if lws is None:
        return None
    runner = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    return str(runner["resources"]["limits"]["nvidia.com/gpu"])


async def _service(client: Client, namespace: str) -> dict[str, Any]:
    return await client.get(r.INFERENCE_SERVICES, "pg", namespace)


async def test_an_unschedulable_pod_moves_the_service_to_the_next_flavor_then_to_no_flavor_fits(
    manager: Manager, client: Client, namespace: str, short_fallback: None
) -> None:
    model = f"qwen-{namespace.rsplit('-', 1)[-1]}"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))

    async def gpus_are(value: str) -> bool:
        return await _gpus(client, namespace) == value

    await eventually(lambda: gpus_are("1"))  # a100, the model's first flavor
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default", "namespace": namespace}}, namespace)
    labels = {"leaderworkerset.sigs.k8s.io/name": "pg", "llmaz.io/model-name": model}
    await client.create(r.PODS, _pod(namespace, "pg-0", labels))
    await _write_pod_status(client, namespace, "pg-0", _unschedulable(INSUFFICIENT))

    await eventually(lambda: gpus_are("2"), what="the a10 flavor rendered")

    async def a10_recorded() -> bool:
        return bool((await _service(client, namespace)).get("status", {}).get("activeFlavor") == "a10")

    # The LeaderWorkerSet is applied before the status is written: wait for the status as well.
    await eventually(a10_recorded, what="the a10 flavor recorded in the status")

    async def fallback_events() -> list[dict[str, Any]]:
        events = (await client.list(EVENTS, namespace)).items
        return [e for e in events if e.get("reason") == "FlavorFallback" and e["regarding"]["kind"] == "Service"]

    (event,) = await eventually(fallback_events)
    assert event["type"] == "Warning"
    assert event["note"].startswith("Moved from flavor a100 to a10: pod pg-0 was unschedulable for ")
    assert event["note"].endswith(INSUFFICIENT)

    async def no_flavor_fits() -> bool:
        service = await _service(client, namespace)
        progressing = next(c for c in service["status"]["conditions"] if c["type"] == "Progressing")
        return "no inference flavor fits (tried a100, a10)" in progressing["message"]

    await eventually(no_flavor_fits, what="no flavor fits")
    assert await _gpus(client, namespace) == "2"
    assert len(await fallback_events()) == 1


GPU = "nvidia.com/gpu"
PRODUCT = "llmaz.io/test-gpu"


def _gpu_node(name: str, product: str) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", GPU: "2", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {PRODUCT: product}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _bound_pod(namespace: str, name: str, node: str, init: list[dict[str, Any]], gpus: int) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.example/w:v1", "resources": {"limits": {GPU: str(gpus)}}}
    spec = {"automountServiceAccountToken": False, "nodeName": node, "initContainers": init, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@contextlib.asynccontextmanager
async def _nodes(client: Client, names: dict[str, str]) -> AsyncIterator[None]:
    """Nodes named `names` (flavor -> node), labelled for their flavor, Ready, with 2 GPUs and no taint."""
    try:
        for flavor, name in names.items():
            await client.create(r.NODES, _gpu_node(name, f"{name}-{flavor}"))
            node = await client.get(r.NODES, name)
            node["spec"]["taints"] = []  # the API server's not-ready taint: there is no kubelet to lift it
            await client.update(r.NODES, node)
        yield
    finally:
        for name in names.values():
            await client.delete(r.NODES, name)


async def test_with_return_the_service_moves_back_to_the_best_flavor_whose_nodes_have_room(
    manager: Manager, client: Client, namespace: str, short_fallback_and_return: None
) -> None:
    suffix = namespace.rsplit("-", 1)[-1]
    names = {flavor: f"fit-{suffix}-{flavor}" for flavor in ("a100", "a10")}
    model = f"qwen-{suffix}"
    flavors = [
        {"name": "a100", "limits": {GPU: 1}, "nodeSelector": {PRODUCT: f"{names['a100']}-a100"}},
        {"name": "a10", "limits": {GPU: 2}, "nodeSelector": {PRODUCT: f"{names['a10']}-a10"}},
        {"name": "t4", "limits": {GPU: 3}, "nodeSelector": {PRODUCT: f"t4-{suffix}"}},
    ]
    spec = open_model(model)
    spec["spec"]["inferenceConfig"]["flavors"] = flavors
    await client.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default", "namespace": namespace}}, namespace)
    sidecar = {"name": "proxy", "image": "registry.example/p:v1", "restartPolicy": "Always"}
    # 1 GPU for the container and 1 for the sidecar beside it: both of the a100 node's 2 are taken.
    blocker = _bound_pod(namespace, "blocker", names["a100"], [{**sidecar, "resources": {"limits": {GPU: "1"}}}], 1)
    # Pods that have ended hold nothing: the a10 node's GPUs are all free.
    finished = [
        _bound_pod(namespace, f"done-{phase.lower()}", names["a10"], [], 2) for phase in ("Succeeded", "Failed")
    ]
    async with _nodes(client, names):
        try:
            await client.create(r.PODS, blocker)
            for pod, phase in zip(finished, ("Succeeded", "Failed"), strict=True):
                await client.create(r.PODS, pod)
                await _write_pod_status(client, namespace, pod["metadata"]["name"], {"phase": phase})
            await client.create(r.OPEN_MODELS, spec)
            await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))

            async def gpus_are(value: str) -> bool:
                return await _gpus(client, namespace) == value

            await eventually(lambda: gpus_are("1"))  # a100, the model's first flavor
            labels = {"leaderworkerset.sigs.k8s.io/name": "pg", "llmaz.io/model-name": model}
            await client.create(r.PODS, _pod(namespace, "pg-0", labels))
            await _write_pod_status(client, namespace, "pg-0", _unschedulable(INSUFFICIENT))
            # Still unschedulable: on to a10, then to t4, the last flavor.
            await eventually(lambda: gpus_are("3"), what="the t4 flavor rendered")
            await client.delete(r.PODS, "pg-0", namespace)  # placed on a t4 node, so to speak

            async def return_events() -> list[dict[str, Any]]:
                events = (await client.list(EVENTS, namespace)).items
                return [e for e in events if e.get("reason") == "FlavorReturn" and e["regarding"]["kind"] == "Service"]

            # A full period on t4, the a100 node has no room (the sidecar's GPU counts) and the a10 node has.
            (event,) = await eventually(return_events, what="a FlavorReturn Event")
            assert (event["type"], event["note"]) == (
                "Normal",
                "Moved back from flavor t4 to a10: its nodes have room for 1 more pods on 1 nodes",
            )
            assert await _gpus(client, namespace) == "2"
            assert (await _service(client, namespace))["status"]["activeFlavor"] == "a10"
        finally:
            for pod in (blocker, *finished):
                await client.delete(r.PODS, pod["metadata"]["name"], namespace, grace_period_seconds=0)
