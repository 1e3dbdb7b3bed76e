"""On a real API server: a Playground annotated `llmaz.io/inference-pool: "true"` gets an InferencePool it
controls, loses it when the annotation goes, leaves someone else's pool of its name alone (saying so), and, while
the cluster has no InferencePool CRD, says so once and gets its pool when the CRD is installed.

No controller-manager runs here, so garbage collection does not: ownership is asserted on the ownerReference.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from llmaz.apis import resources as r
from llmaz.controllers.pools import INFERENCE_POOL_CRD, serves_pools
from llmaz.runtime.client import Client
from llmaz.runtime.client.errors import Invalid
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz.runtime.metrics import REGISTRY
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground

REPO = Path(__file__).resolve().parents[3]
POOL = "llmaz.io/inference-pool"
MODE = "llmaz.io/inference-pool-failure-mode"


async def _crd_served(client: Client) -> bool:
    return serves_pools(await get_or_none(client, r.CUSTOM_RESOURCE_DEFINITIONS, INFERENCE_POOL_CRD))


async def _crd_gone(client: Client) -> bool:
    return await get_or_none(client, r.CUSTOM_RESOURCE_DEFINITIONS, INFERENCE_POOL_CRD) is None


async def _install_crd(control_plane: Cluster, client: Client) -> None:
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "config" / "gie"))
    await eventually(lambda: _crd_served(client), what="the InferencePool CRD to be established")


@pytest_asyncio.fixture
async def gie_crd(control_plane: Cluster, client: Client) -> None:
    """The InferencePool CRD of config/gie, installed and established."""
    await _install_crd(control_plane, client)


@pytest_asyncio.fixture
async def no_gie_crd(control_plane: Cluster, client: Client) -> AsyncIterator[None]:
    """No InferencePool CRD; installed again afterwards for the other tests."""
    control_plane.kubectl("delete", "crd", INFERENCE_POOL_CRD, "--ignore-not-found", "--wait=true")
    await eventually(lambda: _crd_gone(client), what="the InferencePool CRD to be deleted")
    yield
    await _install_crd(control_plane, client)


def _annotated(namespace: str, name: str, model: str, **annotations: str) -> dict[str, Any]:
    obj = playground(namespace, name, model)
    obj["metadata"]["annotations"] = annotations
    return obj


def _pool_condition(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    found = next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "InferencePool"),
        None,
    )
    return (found["status"], found["reason"], found["message"]) if found else None


async def _condition_is(client: Client, namespace: str, name: str, status: str, reason: str) -> dict[str, Any] | None:
    obj = await client.get(r.PLAYGROUNDS, name, namespace)
    found = _pool_condition(obj)
    return obj if found is not None and found[:2] == (status, reason) else None


def _controller_uid(obj: dict[str, Any] | None) -> str | None:
    refs = (obj or {}).get("metadata", {}).get("ownerReferences") or []
    return next((ref["uid"] for ref in refs if ref.get("controller")), None)


async def _own_pool(client: Client, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
    pool = await get_or_none(client, r.INFERENCE_POOLS, name, namespace)
    return pool if _controller_uid(pool) == uid else None


async def _warnings(client: Client, namespace: str, reason: str) -> list[dict[str, Any]]:
    events = (await client.list(EVENTS, namespace)).items
    return [
        e for e in events if (e["type"], e["regarding"].get("kind"), e["reason"]) == ("Warning", "Playground", reason)
    ]


def _reconciles(controller: str) -> float:
    total = 0.0
    for result in ("success", "requeue", "requeue_after", "error"):
        labels = {"controller": controller, "result": result}
        total += REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) or 0.0
    return total


def _requeues(controller: str) -> float:
    labels = {"controller": controller, "result": "requeue"}
    return REGISTRY.get_sample_value("controller_runtime_reconcile_total", labels) or 0.0


async def test_the_crd_is_accepted_and_refuses_repeated_ports_and_a_service_picker_without_port(
    gie_crd: None, client: Client, namespace: str
) -> None:
    spec = {
        "selector": {"matchLabels": {"a": "b"}},
        "targetPorts": [{"number": 8080}, {"number": 8080}],
        "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
    }
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "p"}}
    with pytest.raises(Invalid, match="port numbers must be unique"):
        await client.create(r.INFERENCE_POOLS, {**pool, "spec": spec}, namespace)
    no_port = {**spec, "targetPorts": [{"number": 8080}], "endpointPickerRef": {"name": "epp"}}
    with pytest.raises(Invalid, match="port is required when kind is Service"):
        await client.create(r.INFERENCE_POOLS, {**pool, "spec": no_port}, namespace)
    created = await client.create(
        r.INFERENCE_POOLS, {**pool, "spec": {**no_port, "endpointPickerRef": spec["endpointPickerRef"]}}, namespace
    )
    assert created["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    assert created["spec"]["appProtocol"] == "http"


async def test_an_annotated_playground_gets_a_pool_it_controls_and_loses_it_when_the_annotation_goes(
    gie_crd: None, manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    created = await client.create(r.PLAYGROUNDS, _annotated(namespace, "pg", model, **{POOL: "true", MODE: "FailOpen"}))
    uid = created["metadata"]["uid"]

    pool = await eventually(lambda: _own_pool(client, namespace, "pg", uid), what="the Playground's InferencePool")
    assert pool["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "llmaz"
    assert pool["spec"]["selector"]["matchLabels"] == {
        "leaderworkerset.sigs.k8s.io/name": "pg",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    assert pool["spec"]["targetPorts"] == [{"number": 8080}]
    assert pool["spec"]["endpointPickerRef"]["name"] == "llmaz-epp"
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"
    lb = await eventually(lambda: get_or_none(client, r.SERVICES, "pg-lb", namespace), what="the -lb Service")
    assert pool["spec"]["selector"]["matchLabels"] == lb["spec"]["selector"]
    await eventually(lambda: _condition_is(client, namespace, "pg", "True", "InferencePoolApplied"))

    # The annotation goes: the pool is deleted and the condition dropped.
    current = await client.get(r.PLAYGROUNDS, "pg", namespace)
    current["metadata"]["annotations"] = {}
    await client.update(r.PLAYGROUNDS, current)

    async def pool_gone() -> bool:
        return await get_or_none(client, r.INFERENCE_POOLS, "pg", namespace) is None

    await eventually(pool_gone, what="the InferencePool to be deleted")

    async def condition_dropped() -> bool:
        return _pool_condition(await client.get(r.PLAYGROUNDS, "pg", namespace)) is None

    await eventually(condition_dropped, what="the InferencePool condition to be dropped")


async def test_someone_elses_pool_of_the_name_is_left_alone_with_a_condition_until_deleted(
    gie_crd: None, manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    theirs = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "pg", "labels": {"owner": "user"}},
        "spec": {
            "selector": {"matchLabels": {"app": "mine"}},
            "targetPorts": [{"number": 9000}],
            "endpointPickerRef": {"name": "my-epp", "port": {"number": 9002}},
        },
    }
    mine = await client.create(r.INFERENCE_POOLS, theirs, namespace)
    requeues = _requeues("playground")
    created = await client.create(r.PLAYGROUNDS, _annotated(namespace, "pg", model, **{POOL: "true"}))

    blocked = await eventually(lambda: _condition_is(client, namespace, "pg", "False", "InferencePoolConflict"))
    message = _pool_condition(blocked)
    assert message is not None
    assert message[2].startswith(
        f"InferencePool {namespace}/pg has no controller owner, so it is not this Playground's"
    )
    assert "llmaz.io/inference-pool" in message[2]
    events = await eventually(lambda: _warnings(client, namespace, "InferencePoolConflict"))
    assert events[0]["note"] == message[2]
    # Retried through the rate limiter, and every retry leaves the pool as it was.
    await eventually(lambda: _requeues("playground") >= requeues + 3, what="rate-limited retries")
    untouched = await client.get(r.INFERENCE_POOLS, "pg", namespace)
    assert untouched["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]
    assert "ownerReferences" not in untouched["metadata"]

    # Its owner deletes it: the Playground creates its own.
    await client.delete(r.INFERENCE_POOLS, "pg", namespace)
    uid = created["metadata"]["uid"]
    await eventually(lambda: _own_pool(client, namespace, "pg", uid), within=60, what="the Playground's own pool")
    await eventually(lambda: _condition_is(client, namespace, "pg", "True", "InferencePoolApplied"))


async def test_without_the_crd_a_playground_says_so_once_and_gets_its_pool_when_the_crd_is_installed(
    no_gie_crd: None, manager: Manager, control_plane: Cluster, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    created = await client.create(r.PLAYGROUNDS, _annotated(namespace, "pg", model, **{POOL: "true"}))

    waiting = await eventually(lambda: _condition_is(client, namespace, "pg", "False", "InferencePoolCRDMissing"))
    message = _pool_condition(waiting)
    assert message is not None
    assert "kubectl apply --server-side -k config/gie" in message[2]
    assert "crds/" in message[2]
    await eventually(lambda: _warnings(client, namespace, "InferencePoolCRDMissing"), what="the Warning Event")
    # The manager is ready all the same: nothing about pools is part of its caches' sync or readiness.
    assert manager.informers.has_synced()
    assert manager.informers.problems() == []
    # The inference Service is made all the same: the pool is an extra, never a blocker.
    await eventually(lambda: get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace), what="the inference Service")

    # More reconciles (an edit of the Playground) neither repeat the Event nor retry in a loop.
    before = _reconciles("playground")
    requeues = _requeues("playground")
    current = await client.get(r.PLAYGROUNDS, "pg", namespace)
    current["metadata"]["labels"] = {**(current["metadata"].get("labels") or {}), "touched": "yes"}
    await client.update(r.PLAYGROUNDS, current)
    await eventually(lambda: _reconciles("playground") > before, what="a reconcile of the edited Playground")
    assert _requeues("playground") == requeues

    # The CRD is installed: the CRD watch wakes the Playground, which creates its pool.
    await _install_crd(control_plane, client)
    uid = created["metadata"]["uid"]
    await eventually(lambda: _own_pool(client, namespace, "pg", uid), what="the pool once the CRD is installed")
    await eventually(lambda: _condition_is(client, namespace, "pg", "True", "InferencePoolApplied"))
    events = await _warnings(client, namespace, "InferencePoolCRDMissing")
    assert len(events) == 1
    assert "series" not in events[0], "the Event was repeated as a series"


def _gateway_slice(name: str, *addresses: tuple[str, bool]) -> dict[str, Any]:
    """A slice of the gateway's picker Service, as the EndpointSlice controller would write it."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/service-name": "llmaz-gateway-epp",
                "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 9002, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in addresses],
    }


@pytest_asyncio.fixture
async def gateway_slice(client: Client) -> AsyncIterator[str]:
    """A picker slice in the manager's (and gateway's) namespace, llmaz-system, deleted afterwards."""
    name = f"llmaz-gateway-epp-{secrets.token_hex(3)}"
    await client.create(
        r.ENDPOINT_SLICES, _gateway_slice(name, ("10.1.0.2", True), ("10.1.0.1", False)), "llmaz-system"
    )
    yield name
    await client.delete(r.ENDPOINT_SLICES, name, "llmaz-system")


async def _mirrored(client: Client, namespace: str, addresses: list[str]) -> dict[str, Any] | None:
    found = await get_or_none(client, r.ENDPOINT_SLICES, "llmaz-epp", namespace)
    listed = [e["addresses"][0] for e in (found or {}).get("endpoints") or []]
    return found if found is not None and listed == addresses else None


async def test_a_pools_namespace_gets_the_picker_service_mirroring_the_gateways_ready_endpoints_until_no_pool_is_left(
    gie_crd: None, gateway_slice: str, manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, _annotated(namespace, "a", model, **{POOL: "true"}))
    await client.create(r.PLAYGROUNDS, _annotated(namespace, "b", model, **{POOL: "true"}))

    service = await eventually(lambda: get_or_none(client, r.SERVICES, "llmaz-epp", namespace), what="llmaz-epp")
    assert "selector" not in service["spec"]
    assert service["spec"]["ports"] == [
        {"name": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "port": 9002, "targetPort": 9002}
    ]
    mirrored = await eventually(lambda: _mirrored(client, namespace, ["10.1.0.2"]), what="the ready endpoint mirrored")
    assert mirrored["metadata"]["labels"]["kubernetes.io/service-name"] == "llmaz-epp"
    assert mirrored["ports"][0]["port"] == 9002

    # The gateway's second pod becomes ready: the mirror follows.
    source = await client.get(r.ENDPOINT_SLICES, gateway_slice, "llmaz-system")
    source["endpoints"][1]["conditions"]["ready"] = True
    await client.update(r.ENDPOINT_SLICES, source)
    await eventually(lambda: _mirrored(client, namespace, ["10.1.0.1", "10.1.0.2"]), what="both endpoints mirrored")

    # A deleted mirror is put back.
    await client.delete(r.ENDPOINT_SLICES, "llmaz-epp", namespace)
    await eventually(lambda: _mirrored(client, namespace, ["10.1.0.1", "10.1.0.2"]), what="the mirror restored")

    # One Playground stops asking: the namespace still holds a pool, so the picker stays.
    a = await client.get(r.PLAYGROUNDS, "a", namespace)
    a["metadata"]["annotations"] = {}
    await client.update(r.PLAYGROUNDS, a)

    async def pool_a_gone() -> bool:
        return await get_or_none(client, r.INFERENCE_POOLS, "a", namespace) is None

    await eventually(pool_a_gone, what="pool a deleted")
    assert await get_or_none(client, r.SERVICES, "llmaz-epp", namespace) is not None

    # The last one goes: so do the Service and its slice.
    await client.delete(r.PLAYGROUNDS, "b", namespace)

    async def picker_gone() -> bool:
        service = await get_or_none(client, r.SERVICES, "llmaz-epp", namespace)
        slice_ = await get_or_none(client, r.ENDPOINT_SLICES, "llmaz-epp", namespace)
        return service is None and slice_ is None

    await eventually(picker_gone, what="llmaz-epp and its slice removed")
