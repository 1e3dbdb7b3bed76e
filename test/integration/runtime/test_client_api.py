"""The REST client against a real API server: verbs, patch flavours, subresources, typed errors, watch."""

from __future__ import annotations

import asyncio
import time

import pytest

from llmaz.runtime.client import (
    AlreadyExists,
    ApiError,
    Client,
    Conflict,
    Invalid,
    NotFound,
    PatchType,
)
from llmaz.runtime.metrics import REGISTRY
from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.manifests import CONFIGMAPS, DEPLOYMENTS, LWS, configmap, deployment, leaderworkerset

pytestmark = pytest.mark.integration


async def test_a_configmap_goes_through_create_get_list_update_delete(client: Client, namespace: str) -> None:
    created = await client.create(CONFIGMAPS, configmap("a", namespace, k="v"))
    assert created["metadata"]["uid"]
    fetched = await client.get(CONFIGMAPS, "a", namespace)
    assert fetched["data"] == {"k": "v"}
    fetched["data"]["k"] = "w"
    updated = await client.update(CONFIGMAPS, fetched)
    assert updated["data"] == {"k": "w"}
    assert updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    await client.delete(CONFIGMAPS, "a", namespace)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "a", namespace)


async def test_list_follows_continue_tokens_and_fills_in_kind(client: Client, namespace: str) -> None:
    for i in range(5):
        cm = configmap(f"cm-{i}", namespace)
        cm["metadata"]["labels"] = {"group": "even" if i % 2 == 0 else "odd"}
        await client.create(CONFIGMAPS, cm)
    paged = await client.list(CONFIGMAPS, namespace, limit=2)
    names = sorted(o["metadata"]["name"] for o in paged.items if o["metadata"]["name"].startswith("cm-"))
    assert names == [f"cm-{i}" for i in range(5)]
    assert int(paged.resource_version) > 0
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in paged.items)
    even = await client.list(CONFIGMAPS, namespace, label_selector="group=even")
    assert sorted(o["metadata"]["name"] for o in even.items) == ["cm-0", "cm-2", "cm-4"]


async def test_merge_strategic_and_json_patches_apply(client: Client, namespace: str) -> None:
    await client.create(CONFIGMAPS, configmap("p", namespace, a="1"))
    merged = await client.patch(CONFIGMAPS, "p", {"data": {"b": "2"}}, namespace)
    assert merged["data"] == {"a": "1", "b": "2"}
    strategic = await client.patch(CONFIGMAPS, "p", {"data": {"c": "3"}}, namespace, patch_type=PatchType.STRATEGIC)
    assert strategic["data"] == {"a": "1", "b": "2", "c": "3"}
    ops = [{"op": "replace", "path": "/data/a", "value": "9"}, {"op": "remove", "path": "/data/b"}]
    jsonpatched = await client.patch(CONFIGMAPS, "p", ops, namespace, patch_type=PatchType.JSON)
    assert jsonpatched["data"] == {"a": "9", "c": "3"}


async def test_strategic_merge_is_refused_for_a_custom_resource(client: Client, namespace: str) -> None:
    await client.create(LWS, leaderworkerset("s", namespace))
    with pytest.raises(ApiError) as caught:
        await client.patch(LWS, "s", {"spec": {"replicas": 2}}, namespace, patch_type=PatchType.STRATEGIC)
    assert caught.value.status == 415


async def test_server_side_apply_creates_owns_fields_and_conflicts_unless_forced(
    client: Client, namespace: str
) -> None:
    applied = await client.apply(CONFIGMAPS, configmap("ssa", namespace, a="1"), field_manager="one")
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert managers == {"one"}
    with pytest.raises(Conflict):
        await client.apply(CONFIGMAPS, configmap("ssa", namespace, a="2"), field_manager="two", force=False)
    forced = await client.apply(CONFIGMAPS, configmap("ssa", namespace, a="2"), field_manager="two")
    assert forced["data"] == {"a": "2"}


async def test_server_side_apply_needs_a_field_manager(client: Client, namespace: str) -> None:
    with pytest.raises(ValueError, match="field_manager"):
        await client.patch(CONFIGMAPS, "x", {}, namespace, patch_type=PatchType.APPLY)


async def test_status_and_scale_subresources_of_a_deployment(client: Client, namespace: str) -> None:
    created = await client.create(DEPLOYMENTS, deployment("d", namespace))
    created["status"] = {"replicas": 7, "observedGeneration": 1}
    ignored = await client.update(DEPLOYMENTS, created)
    assert ignored.get("status", {}).get("replicas") != 7  # the main resource ignores status
    ignored["status"] = {"replicas": 7, "observedGeneration": 1}
    with_status = await client.update_status(DEPLOYMENTS, ignored)
    assert with_status["status"]["replicas"] == 7
    patched = await client.patch_status(DEPLOYMENTS, "d", {"status": {"replicas": 4}}, namespace)
    assert patched["status"]["replicas"] == 4
    scale = await client.scale(DEPLOYMENTS, "d", 3, namespace)
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 3)
    assert (await client.get(DEPLOYMENTS, "d", namespace))["spec"]["replicas"] == 3
    assert (await client.get_scale(DEPLOYMENTS, "d", namespace))["status"]["replicas"] == 4


async def test_a_leaderworkerset_goes_through_apply_status_scale_and_delete(client: Client, namespace: str) -> None:
    applied = await client.apply(LWS, leaderworkerset("l", namespace), field_manager="llmaz")
    assert applied["spec"]["leaderWorkerTemplate"]["size"] == 2
    status = await client.patch_status(LWS, "l", {"status": {"replicas": 1, "readyReplicas": 0}}, namespace)
    assert status["status"]["replicas"] == 1
    await client.scale(LWS, "l", 3, namespace)
    assert (await client.get(LWS, "l", namespace))["spec"]["replicas"] == 3
    assert (await client.get_scale(LWS, "l", namespace))["spec"]["replicas"] == 3
    listed = await client.list(LWS, namespace)
    assert [o["kind"] for o in listed.items] == ["LeaderWorkerSet"]
    await client.delete(LWS, "l", namespace)
    with pytest.raises(NotFound):
        await client.get(LWS, "l", namespace)


async def test_delete_sends_preconditions_and_propagation_policy(client: Client, namespace: str) -> None:
    created = await client.create(CONFIGMAPS, configmap("del", namespace))
    with pytest.raises(Conflict):
        await client.delete(CONFIGMAPS, "del", namespace, preconditions={"uid": "not-the-uid"})
    # No garbage collector runs here, so a foreground delete leaves the object waiting on its finalizer.
    pending = await client.delete(
        CONFIGMAPS, "del", namespace, propagation_policy="Foreground",
        preconditions={"uid": created["metadata"]["uid"]},
    )  # fmt: skip
    assert "foregroundDeletion" in pending["metadata"]["finalizers"]
    assert pending["metadata"]["deletionTimestamp"]
    await client.patch(CONFIGMAPS, "del", {"metadata": {"finalizers": None}}, namespace)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "del", namespace)


async def test_delete_collection_deletes_what_matches_in_its_namespace_only(
    client: Client, namespace: str, control_plane: Cluster
) -> None:
    other = control_plane.create_namespace("other")
    for name, labels in (("a", {"app": "x"}), ("b", {"app": "x"}), ("c", {"app": "y"})):
        await client.create(
            CONFIGMAPS,
            {**configmap(name, namespace), "metadata": {"name": name, "namespace": namespace, "labels": labels}},
        )
    await client.create(CONFIGMAPS, configmap("a", other))
    await client.delete_collection(CONFIGMAPS, namespace, label_selector="app=x")
    assert await _configmap_names(client, namespace) == {"c"}
    await client.delete_collection(CONFIGMAPS, namespace)
    assert await _configmap_names(client, namespace) == set()
    assert await _configmap_names(client, other) == {"a"}


async def _configmap_names(client: Client, namespace: str) -> set[str]:
    return {item["metadata"]["name"] for item in (await client.list(CONFIGMAPS, namespace)).items}


async def test_the_server_errors_arrive_typed(client: Client, namespace: str) -> None:
    with pytest.raises(NotFound) as not_found:
        await client.get(CONFIGMAPS, "missing", namespace)
    assert not_found.value.status == 404
    first = await client.create(CONFIGMAPS, configmap("dup", namespace))
    with pytest.raises(AlreadyExists) as exists:
        await client.create(CONFIGMAPS, configmap("dup", namespace))
    assert exists.value.status == 409
    await client.patch(CONFIGMAPS, "dup", {"data": {"x": "1"}}, namespace)
    with pytest.raises(Conflict) as stale:
        await client.update(CONFIGMAPS, first)  # first carries the old resourceVersion
    assert stale.value.status == 409
    with pytest.raises(Invalid) as invalid:
        await client.create(CONFIGMAPS, configmap("Not_A_Valid_Name", namespace))
    assert invalid.value.status == 422
    assert [c.field for c in invalid.value.causes] == ["metadata.name"]


async def test_a_watch_streams_changes_in_order_and_ends_at_its_timeout(client: Client, namespace: str) -> None:
    start_rv = (await client.list(CONFIGMAPS, namespace)).resource_version
    await client.create(CONFIGMAPS, configmap("w", namespace))
    await client.patch(CONFIGMAPS, "w", {"data": {"a": "1"}}, namespace)
    await client.delete(CONFIGMAPS, "w", namespace)
    seen: list[tuple[str, str]] = []
    began = time.monotonic()
    async for ev in client.watch(CONFIGMAPS, namespace, resource_version=start_rv, timeout_seconds=2):
        if ev.type != "BOOKMARK":
            seen.append((ev.type, ev.object["metadata"]["name"]))
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    assert 1.5 < time.monotonic() - began < 30


async def test_requests_are_counted_in_the_rest_client_metrics(client: Client, namespace: str) -> None:
    def count(code: str, method: str) -> float:
        value = REGISTRY.get_sample_value(
            "rest_client_requests_total", {"code": code, "method": method, "host": client.config.host_label}
        )
        return value or 0.0

    before_ok, before_missing = count("200", "GET"), count("404", "GET")
    await client.list(CONFIGMAPS, namespace)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "nope", namespace)
    assert count("200", "GET") == before_ok + 1
    assert count("404", "GET") == before_missing + 1
    observed = REGISTRY.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": "GET", "host": client.config.host_label}
    )
    assert observed is not None
    assert observed >= 2


async def test_concurrent_requests_share_one_session(client: Client, namespace: str) -> None:
    results = await asyncio.gather(*(client.create(CONFIGMAPS, configmap(f"c{i}", namespace)) for i in range(20)))
    assert len({r["metadata"]["name"] for r in results}) == 20
