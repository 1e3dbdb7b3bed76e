"""Namespaces are tenants, on a real API server with the manager running: a Playground whose model another
namespace served first is told so in `ModelRouted=False`/`ModelNameTaken` and a Warning Event, and the condition
clears when the owner goes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from llmaz.apis import constants as c
from llmaz.apis import resources as r
from llmaz.runtime.client import Client
from llmaz.runtime.events import EVENTS
from llmaz.runtime.manager import Manager
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually

from .objects import get_or_none, open_model, playground


@pytest_asyncio.fixture
async def second_namespace(control_plane: Cluster, client: Client) -> AsyncIterator[str]:
    """Another tenant's namespace, named to sort after the test's own (so a creation in the same second, a tie,
    still leaves the name to the test's namespace), emptied afterwards."""
    name = control_plane.create_namespace("zz-second-tenant")
    yield name
    control_plane.delete_namespace(name)
    for resource in (r.PLAYGROUNDS, r.INFERENCE_SERVICES, r.LEADER_WORKER_SETS, r.SERVICES):
        await client.delete_collection(resource, name)


def _model_routed(obj: dict[str, Any] | None) -> tuple[str, str, str] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    found = next((cond for cond in conditions if cond["type"] == c.CONDITION_MODEL_ROUTED), None)
    return None if found is None else (found["status"], found["reason"], found["message"])


async def test_the_second_namespaces_playground_is_told_and_the_condition_clears_when_the_first_goes(
    manager: Manager, client: Client, namespace: str, second_namespace: str
) -> None:
    assert namespace < second_namespace
    model = f"tiny-{secrets.token_hex(4)}"  # cluster-scoped: unique per run, and naming no namespace
    await client.create(r.OPEN_MODELS, open_model(model))
    await client.create(r.PLAYGROUNDS, playground(namespace, "demo", model))
    # The first Playground has its status before the copy exists.
    await eventually(lambda: _has_status(client, namespace))
    await client.create(r.PLAYGROUNDS, playground(second_namespace, "demo", model))

    async def copy_routed(status: str) -> tuple[str, str, str] | None:
        found = _model_routed(await get_or_none(client, r.PLAYGROUNDS, "demo", second_namespace))
        return found if found is not None and found[0] == status else None

    taken = await eventually(lambda: copy_routed("False"), what="ModelRouted=False on the copy")
    assert taken[1] == c.REASON_MODEL_NAME_TAKEN
    assert f"model {model} is served from another namespace" in taken[2]
    assert namespace not in taken[2]

    async def warned() -> list[str]:
        events = (await client.list(EVENTS, second_namespace)).items
        return [e["note"] for e in events if (e["type"], e["reason"]) == ("Warning", c.REASON_MODEL_NAME_TAKEN)]

    assert await eventually(warned, what="a ModelNameTaken Event") == [taken[2]]
    # The owner is told nothing.
    assert _model_routed(await client.get(r.PLAYGROUNDS, "demo", namespace)) is None

    # The first team deletes its Playground, and its Service (garbage collection, which does not run here, would).
    await client.delete(r.PLAYGROUNDS, "demo", namespace)
    await client.delete(r.INFERENCE_SERVICES, "demo", namespace)
    owned = await eventually(lambda: copy_routed("True"), what="ModelRouted=True on the copy")
    assert owned[1] == c.REASON_MODEL_NAME_OWNED
    await client.delete(r.OPEN_MODELS, model)


async def _has_status(client: Client, namespace: str) -> bool:
    found = await get_or_none(client, r.PLAYGROUNDS, "demo", namespace)
    return bool((found or {}).get("status", {}).get("conditions"))
