"""A steady cluster costs no writes; global settings and readiness are reconciled from real objects."""

from __future__ import annotations

from collections import Counter

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.manager import Manager
from llmaz.runtime.metrics import REGISTRY
from llmaz_dev.testing.waiting import eventually

from .objects import conditions, get_or_none, open_model, playground, set_lws_available
from .settling import reconciles, settled

_WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _writes() -> Counter[tuple[str, str]]:
    """Write requests sent by this process so far, by (method, status code)."""
    counts: Counter[tuple[str, str]] = Counter()
    for metric in REGISTRY.collect():
        if metric.name != "rest_client_requests":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total") and sample.labels.get("method") in _WRITES:
                counts[(sample.labels["method"], sample.labels["code"])] += int(sample.value)
    return counts


async def test_a_converged_playground_makes_no_writes(manager: Manager, client: Client, namespace: str) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))
    await eventually(lambda: get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace))
    await set_lws_available(client, namespace, "pg", True)

    async def ready() -> bool:
        pg = await client.get(r.PLAYGROUNDS, "pg", namespace)
        return conditions(pg).get("Available") == ("True", "PlaygroundReady")

    await eventually(ready)
    # The watch events of the manager's last writes have come back and been reconciled.
    everything = [
        (r.PLAYGROUNDS, "pg"),
        (r.INFERENCE_SERVICES, "pg"),
        (r.LEADER_WORKER_SETS, "pg"),
        (r.SERVICES, "pg-lb"),
        (r.OPEN_MODELS, model),
    ]
    await settled(manager, client, namespace, everything)
    before, reconciled = _writes(), reconciles("playground", "service")
    assert before.total() > 0, "the manager's applies and status writes must show in the counter being watched"
    # Touched, each parent is reconciled again with nothing to change.
    for resource in (r.PLAYGROUNDS, r.INFERENCE_SERVICES):
        await client.patch(resource, "pg", {"metadata": {"annotations": {"touched": "yes"}}}, namespace)
    await settled(manager, client, namespace, everything)
    assert reconciles("playground", "service") >= reconciled + 2, "the touches did not make both reconcile"
    touches = Counter({("PATCH", "200"): 2})
    assert _writes() - before == touches, "writes by (method, code) besides the test's two touches"


async def test_editing_the_global_config_rerenders_the_init_container_image(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))

    async def loader_image() -> str | None:
        lws = await get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace)
        if lws is None:
            return None
        init = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["initContainers"]
        return str(init[0]["image"])

    assert await eventually(loader_image) == "llmaz-model-loader:v0.1.0"
    config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
    original = config["data"]["config.data"]
    config["data"]["config.data"] = "scheduler-name: default-scheduler\ninit-container-image: example.com/loader:v2\n"
    await client.update(r.CONFIG_MAPS, config)
    try:
        await eventually(lambda: _equals(loader_image, "example.com/loader:v2"))
    finally:
        config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
        config["data"]["config.data"] = original
        await client.update(r.CONFIG_MAPS, config)


async def test_the_scheduler_name_is_persisted_into_the_service_template(
    manager: Manager, client: Client, namespace: str
) -> None:
    model = f"{namespace}-m"
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "pg", model))

    async def scheduler_names() -> tuple[str, str] | None:
        service = await get_or_none(client, r.INFERENCE_SERVICES, "pg", namespace)
        lws = await get_or_none(client, r.LEADER_WORKER_SETS, "pg", namespace)
        if service is None or lws is None:
            return None
        on_service = service["spec"]["workloadTemplate"]["workerTemplate"]["spec"].get("schedulerName")
        on_lws = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].get("schedulerName")
        return (on_service, on_lws) if on_service and on_lws else None

    assert await eventually(scheduler_names) == ("default-scheduler", "default-scheduler")


async def test_models_and_backends_report_whether_they_are_usable(
    manager: Manager, client: Client, namespace: str
) -> None:
    good = f"{namespace}-good"
    bad = f"{namespace}-bad"
    await client.create(r.OPEN_MODELS, open_model(good))
    await client.create(r.OPEN_MODELS, open_model(bad, uri="ftp://bucket/model"))
    broken_backend = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "BackendRuntime",
        "metadata": {"name": f"{namespace}-broken"},
        "spec": {"image": "e", "version": "1", "recommendedConfigs": [{"name": "default", "args": ["{{ .Nope }}"]}]},
    }
    await client.create(r.BACKEND_RUNTIMES, broken_backend)

    async def ready(resource: object, name: str) -> tuple[str, str] | None:
        obj = await client.get(resource, name)  # type: ignore[arg-type]
        return conditions(obj).get("Ready")

    assert await eventually(lambda: ready(r.OPEN_MODELS, good)) == ("True", "ModelReady")
    assert await eventually(lambda: ready(r.OPEN_MODELS, bad)) == ("False", "InvalidModel")
    assert await eventually(lambda: ready(r.BACKEND_RUNTIMES, f"{namespace}-broken")) == (
        "False",
        "InvalidBackendRuntime",
    )
    assert await eventually(lambda: ready(r.BACKEND_RUNTIMES, "vllm")) == ("True", "BackendRuntimeReady")


async def _equals(check: object, expected: str) -> bool:
    return bool(await check() == expected)  # type: ignore[operator]
