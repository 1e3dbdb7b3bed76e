"""Playground -> Service -> LeaderWorkerSet on a real API server, with the manager running in-process."""

from __future__ import annotations

import time

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager
from llmaz_dev.testing.waiting import eventually

from .objects import conditions, get_or_none, open_model, playground, set_lws_available


async def _conditions_of(client: Client, resource: object, namespace: str, name: str) -> dict[str, tuple[str, str]]:
    return conditions(await client.get(resource, name, namespace))  # type: ignore[arg-type]


async def test_a_playground_goes_through_llmaz_condition_sequence(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-llama3"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))

    async def playground_is(expected: dict[str, tuple[str, str]]) -> bool:
        return await _conditions_of(client, r.PLAYGROUNDS, namespace, "pg") == expected

    async def service_is(expected: dict[str, tuple[str, str]]) -> bool:
        return await _conditions_of(client, r.INFERENCE_SERVICES, namespace, "pg") == expected

    await eventually(lambda: playground_is({"Progressing": ("True", "Pending")}))
    await eventually(lambda: service_is({"Progressing": ("True", "ServiceInProgress")}))
    lws = await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace))
    assert lws["spec"]["startupPolicy"] == "LeaderReady"
    assert await get_or_none(client, r.SERVICES, "pg-lb", namespace) is not None

    await set_lws_available(client, namespace, "pg", True)
    await eventually(
        lambda: service_is({"Progressing": ("True", "ServiceInProgress"), "Available": ("True", "ServiceReady")})
    )
    await eventually(
        lambda: playground_is({"Progressing": ("True", "Pending"), "Available": ("True", "PlaygroundReady")})
    )
    pg = await client.get(r.PLAYGROUNDS, "pg", namespace)
    assert pg["status"]["replicas"] == 1
    assert pg["status"]["selector"].startswith("leaderworkerset.sigs.k8s.io/name=pg")

    await set_lws_available(client, namespace, "pg", False)
    await eventually(
        lambda: service_is({"Progressing": ("True", "ServiceInProgress"), "Available": ("False", "ServiceNotReady")})
    )
    await eventually(
        lambda: playground_is(
            {"Progressing": ("True", "PlaygroundInProgress"), "Available": ("False", "PlaygroundNotReady")}
        )
    )

    await set_lws_available(client, namespace, "pg", True)
    await eventually(
        lambda: playground_is(
            {"Progressing": ("True", "PlaygroundInProgress"), "Available": ("True", "PlaygroundReady")}
        )
    )


async def test_a_foreign_service_blocks_the_playground_until_it_is_deleted(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    foreign = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Service",
        "metadata": {"name": "pg", "namespace": namespace},
        "spec": {
            "modelClaims": {"models": [{"name": model}]},
            "workloadTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "model-runner", "image": "x"}]}}},
        },
    }
    await client.create(r.INFERENCE_SERVICES, foreign)
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    await eventually(
        lambda: _conditions_of(client, r.PLAYGROUNDS, namespace, "pg"),
    )
    # llmaz's message, then the object in the way and its controller.
    conflict = f"inference Service {namespace}/pg has no controller owner"
    pg = await eventually(
        lambda: _message_is(client, namespace, f"Playground owns the same name with an existing Service: {conflict}")
    )
    assert conditions(pg) == {"Progressing": ("False", "AbortProcessing")}

    await client.delete(r.INFERENCE_SERVICES, "pg", namespace)
    await eventually(lambda: _conditions_of_equal(client, namespace, {"Progressing": ("True", "Pending")}))


async def test_a_playground_waiting_for_its_model_recovers_at_once_when_the_model_appears(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-late"
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    await eventually(lambda: _message_is(client, namespace, "Waiting for model creation"))
    started = time.monotonic()
    await client.create(r.OPEN_MODELS, open_model(model))
    await eventually(lambda: _conditions_of_equal(client, namespace, {"Progressing": ("True", "Pending")}), within=5)
    assert time.monotonic() - started < 2.0


async def test_a_missing_backend_runtime_is_reported_and_recovered_from(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    backend = f"{namespace}-engine"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(
        r.PLAYGROUNDS, playground(namespace, "pg", model, backendRuntimeConfig={"backendName": backend})
    )
    await eventually(lambda: _message_is(client, namespace, f"Waiting for BackendRuntime {backend} creation"))
    await client.create(r.BACKEND_RUNTIMES, _backend(backend, "v1"))
    await eventually(lambda: _conditions_of_equal(client, namespace, {"Progressing": ("True", "Pending")}), within=5)
    service = await eventually(lambda: get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace))
    assert service["spec"]["workloadTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] == "engine:v1"


async def test_editing_a_backend_runtime_rerenders_the_leader_worker_set(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    backend = f"{namespace}-engine"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.BACKEND_RUNTIMES, _backend(backend, "v1"))
    await client.create(
        r.PLAYGROUNDS, playground(namespace, "pg", model, backendRuntimeConfig={"backendName": backend})
    )
    await eventually(lambda: _lws_image_is(client, namespace, "engine:v1"))
    # A merge patch, not get-and-update: the readiness controller writes this object's status meanwhile.
    await client.patch(r.BACKEND_RUNTIMES, backend, {"spec": {"version": "v2"}})
    await eventually(lambda: _lws_image_is(client, namespace, "engine:v2"))


async def test_scaling_the_playground_scales_service_and_leader_worker_set(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace))
    await client.scale(r.PLAYGROUNDS, "pg", 3, namespace)

    async def replicas_are_three() -> bool:
        service = await client.get(r.INFERENCE_SERVICES, "pg", namespace)
        lws = await client.get(r.LEADER_WORKER_SETS, "pg", namespace)
        return bool(service["spec"]["replicas"] == 3 and lws["spec"]["replicas"] == 3)

    await eventually(replicas_are_three)


async def test_an_hpa_follows_elastic_config_and_is_deleted_when_it_is_removed(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    elastic = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "scaleTrigger": {
            "hpa": {
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                    }
                ]
            }
        },
    }
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model, elasticConfig=elastic))
    hpa = await eventually(lambda: get_or_none(client, r.HORIZONTAL_POD_AUTOSCALERS, "pg", namespace))
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "name": "pg",
    }
    assert hpa["spec"]["maxReplicas"] == 3

    # A merge patch, not get-and-update: the Playground controller writes this object's status meanwhile.
    await client.patch(r.PLAYGROUNDS, "pg", {"spec": {"elasticConfig": None}}, namespace)

    async def hpa_gone() -> bool:
        return await get_or_none(client, r.HORIZONTAL_POD_AUTOSCALERS, "pg", namespace) is None

    await eventually(hpa_gone)


def _backend(name: str, version: str) -> dict[str, object]:
    return {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "BackendRuntime",
        "metadata": {"name": name},
        "spec": {
            "image": "engine",
            "version": version,
            "recommendedConfigs": [{"name": "default", "args": ["--model", "{{ .ModelPath }}"]}],
        },
    }


async def _message_is(client: Client, namespace: str, message: str) -> dict[str, object] | None:
    pg = await client.get(r.PLAYGROUNDS, "pg", namespace)
    messages = [c["message"] for c in (pg.get("status") or {}).get("conditions") or []]
    return pg if message in messages else None


async def _conditions_of_equal(client: Client, namespace: str, expected: dict[str, tuple[str, str]]) -> bool:
    return await _conditions_of(client, r.PLAYGROUNDS, namespace, "pg") == expected


async def _lws_image_is(client: Client, namespace: str, image: str) -> bool:
    lws = await get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace)
    if lws is None:
        return False
    containers = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    return bool(containers[0]["image"] == image)
