"""Hold, don't fail: a request for a model whose replicas are starting waits for a ready endpoint, up to a bound;
one whose replicas cannot come is answered at once, with the reason the Playground's status gives."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from llmaz.apis import constants as c
from llmaz.gateway.proxy.server import GatewayOptions
from llmaz.gateway.scaling.outlook import Coming, Outlook, cannot_become_ready, outlook
from llmaz_dev.testing.waiting import eventually

from .support import (
    NAMESPACE,
    WAIT,
    Cluster,
    FakeEngine,
    endpoint_slice,
    engines,
    inference_service,
    open_model,
    playground,
    running_gateway,
)

CHAT = "/v1/chat/completions"
CRASH_LOOP = "ContainerCrashLooping: pod p-0, container model-runner exited with code 1: out of memory"
IMAGE_PULL = "ImagePullFailed: pod p-0, container model-runner: cannot pull image vllm/vllm-openai:nope"
UNSCHEDULABLE = "Unschedulable: pod p-0: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def with_status(found: dict[str, Any], status: str, reason: str, message: str) -> dict[str, Any]:
    found["status"] = {
        "conditions": [{"type": c.CONDITION_PROGRESSING, "status": status, "reason": reason, "message": message}]
    }
    return found


def restarting(name: str = "p", model: str = "m") -> dict[str, Any]:
    """A Playground whose replica is being replaced: in progress, nothing wrong found."""
    return with_status(playground(name, model), "True", c.REASON_PENDING, c.MESSAGE_WAITING_FOR_SERVICE_READY)


def failing(finding: str, name: str = "p") -> dict[str, Any]:
    message = f"{c.MESSAGE_WAITING_FOR_SERVICE_READY}: {finding}"
    return with_status(playground(name, "m"), "True", c.REASON_PENDING, message)


def ready_slice(engine: FakeEngine, name: str = "p") -> dict[str, Any]:
    return endpoint_slice(f"{name}-lb-new", f"{name}-lb", engine.port, (engine.endpoint.address, True, False))


@pytest.mark.parametrize("port", ["api", "activator"])
async def test_a_request_during_a_restart_is_held_until_the_new_replica_is_ready_and_then_answered(port: str) -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.open_models.add(open_model("m"))
        cluster.playgrounds.add(restarting())
        cluster.slices.add(endpoint_slice("p-lb-old", "p-lb", engine.port, ("127.0.0.1", False, True)))  # stopping
        options = GatewayOptions(hold_timeout=WAIT, activator_address="127.0.0.1:0")
        async with running_gateway(cluster, options) as gw:
            url = gw.url if port == "api" else f"http://127.0.0.1:{gw.gateway.activator_port}"
            held = asyncio.create_task(gw.session.post(url + CHAT, json={"model": "m", "messages": []}))
            await held_in_flight(gw, "m")
            assert not held.done()
            cluster.slices.add(ready_slice(engine))
            async with await asyncio.wait_for(held, WAIT) as resp:
                assert resp.status == 200
                assert (await resp.json())["object"] == "chat.completion"
        assert len(engine.requests) == 1


async def held_in_flight(gw: Any, model: str) -> None:
    """Wait until the request is routed and held (counted in flight): the positive signal that it waits."""
    await eventually(lambda: gw.gateway.in_flight.of_model(model) > 0, WAIT, "the request held")


async def test_a_request_held_past_the_bound_is_a_503_model_not_ready_with_retry_after() -> None:
    cluster = Cluster().synced()
    cluster.playgrounds.add(restarting())
    async with running_gateway(cluster, GatewayOptions(hold_timeout=0.3)) as gw:
        started = time.monotonic()
        async with gw.session.post(gw.url + CHAT, json={"model": "m", "messages": []}) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "5"
            answer = await resp.json()
        assert time.monotonic() - started >= 0.3
    assert answer["error"]["code"] == "model_not_ready"
    assert answer["error"]["message"] == (
        "The model `m` is starting but had no ready endpoint within 0 s. Retry later."
    )


async def test_a_held_request_is_a_404_at_once_when_the_models_last_playground_is_deleted() -> None:
    cluster = Cluster().synced()
    cluster.open_models.add(open_model("m"))
    cluster.playgrounds.add(restarting())
    async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT)) as gw:
        held = asyncio.create_task(gw.session.post(gw.url + CHAT, json={"model": "m", "messages": []}))
        await held_in_flight(gw, "m")
        cluster.playgrounds.delete(restarting())
        async with await asyncio.wait_for(held, WAIT / 2) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        ({"services": [inference_service("s", "m")]}, "no Playground serves it"),
        ({"playgrounds": [failing(CRASH_LOOP)]}, f"Playground {NAMESPACE}/p: {CRASH_LOOP}"),
        ({"playgrounds": [failing(IMAGE_PULL)]}, f"Playground {NAMESPACE}/p: {IMAGE_PULL}"),
        (
            {
                "playgrounds": [
                    with_status(playground("p", "m"), "False", "AbortProcessing", "Waiting for model creation")
                ]
            },
            f"Playground {NAMESPACE}/p: AbortProcessing: Waiting for model creation",
        ),
    ],
    ids=["no-playground", "crash-loop", "image-pull", "aborted"],
)
async def test_a_model_whose_replicas_cannot_come_is_answered_at_once_the_reason_in_the_log_only(
    objects: dict[str, list[dict[str, Any]]], reason: str
) -> None:
    cluster = Cluster().synced()
    for obj in objects.get("services", []):
        cluster.services.add(obj)
    for obj in objects.get("playgrounds", []):
        cluster.playgrounds.add(obj)
    async with running_gateway(cluster, GatewayOptions(hold_timeout=10 * WAIT)) as gw:
        with capture_logs() as logs:
            status, answer = await gw.post(CHAT, {"model": "m", "messages": []})  # bounded by WAIT, below the hold
    assert status == 503
    assert answer["error"]["code"] == "model_not_ready"
    # Other namespaces' objects and their conditions are not the client's to read: the log line has them.
    assert answer["error"]["message"] == "The model `m` has no ready endpoint, and none is coming."
    assert [(log["code"], log["detail"]) for log in logs if log["event"] == "request"] == [(503, reason)]


def test_the_outlook_of_a_model_follows_its_playgrounds() -> None:
    def opted_in(pg: dict[str, Any]) -> bool:
        return pg["metadata"].get("annotations", {}).get("llmaz.io/scale-to-zero-after") is not None

    asleep = playground("z", "m")
    asleep["spec"]["replicas"] = 0
    asleep["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "5m"}
    off = playground("o", "m")
    off["spec"]["replicas"] = 0
    assert outlook([], opted_in) == Outlook(None, "no Playground serves it")
    assert outlook([asleep, failing(CRASH_LOOP)], opted_in) == Outlook(Coming.WAKING, to_wake=(asleep,))
    assert outlook([restarting()], opted_in) == Outlook(Coming.STARTING)
    assert outlook([failing(UNSCHEDULABLE)], opted_in) == Outlook(Coming.STARTING)  # a node may still come
    assert outlook([off, failing(CRASH_LOOP, name="q"), restarting("r")], opted_in) == Outlook(Coming.STARTING)
    assert outlook([failing(IMAGE_PULL, name="q"), off], opted_in) == Outlook(
        None, f"Playground {NAMESPACE}/o: it runs 0 replicas; Playground {NAMESPACE}/q: {IMAGE_PULL}"
    )
    assert cannot_become_ready(playground("p", "m")) is None  # no status yet: just created


async def test_with_scale_to_zero_off_a_restart_is_still_held_and_a_sleeping_model_answers_at_once() -> None:
    async with engines(1) as (engine,):
        cluster = Cluster().synced()
        cluster.playgrounds.add(restarting())
        asleep = playground("z", "sleepy")
        asleep["spec"]["replicas"] = 0
        asleep["metadata"]["annotations"] = {"llmaz.io/scale-to-zero-after": "5m"}
        cluster.playgrounds.add(asleep)
        async with running_gateway(cluster, GatewayOptions(hold_timeout=WAIT)) as gw:  # no waker: scale to zero off
            status, answer = await gw.post(CHAT, {"model": "sleepy", "messages": []})
            assert (status, answer["error"]["code"]) == (503, "model_not_ready")
            assert answer["error"]["message"] == "The model `sleepy` has no ready endpoint, and none is coming."
            held = asyncio.create_task(gw.post(CHAT, {"model": "m", "messages": []}))
            await held_in_flight(gw, "m")
            cluster.slices.add(ready_slice(engine))
            status, _ = await asyncio.wait_for(held, WAIT)
            assert status == 200
