"""Flavor fallback against a real API server: a pod written Unschedulable (as the scheduler would) moves the
Service to its next flavor after `flavor-fallback-after`, then, still unschedulable, to "no flavor fits" — with
no pod event in between: the requeue after the remaining time is what brings the second decision."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz.testing.waiting import eventually

from .objects import get_or_none, open_model, playground
from .test_pod_failures import SERVICE_ACCOUNTS, _pod, _unschedulable, _write_pod_status

INSUFFICIENT = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


@pytest_asyncio.fixture
async def short_fallback(client: Client) -> AsyncIterator[None]:
    config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
    original = config["data"]["config.data"]
    config["data"]["config.data"] = original.rstrip() + "\nflavor-fallback-after: 2s\n"
    await client.update(r.CONFIG_MAPS, config)
    try:
        yield
    finally:
        config = await client.get(r.CONFIG_MAPS, "llmaz-global-config", "llmaz-system")
        config["data"]["config.data"] = original
        await client.update(r.CONFIG_MAPS, config)


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
    service = await _service(client, namespace)
    assert service["status"]["activeFlavor"] == "a10"

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
