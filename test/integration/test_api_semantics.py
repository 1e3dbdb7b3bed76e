"""API-server behaviour the project relies on, checked against the real thing.

Structural defaulting, server-side apply list-map merges, watches from a resourceVersion, and RBAC for
ServiceAccount tokens.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from llmaz_dev.envtest import Cluster
from llmaz_dev.testing.waiting import eventually


class CustomResource(TypedDict):
    group: str
    version: str
    plural: str


LWS: CustomResource = {"group": "leaderworkerset.x-k8s.io", "version": "v1", "plural": "leaderworkersets"}
APPLY = "application/apply-patch+yaml"


def leaderworkerset(name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": containers}}}},
    }


async def apply(api: client.CustomObjectsApi, namespace: str, body: dict[str, Any], manager: str) -> Any:
    return await api.patch_namespaced_custom_object(
        **LWS,
        namespace=namespace,
        name=body["metadata"]["name"],
        body=body,
        field_manager=manager,
        force=True,
        _content_type=APPLY,  # type: ignore[call-arg]  # the stub omits _content_type; the client accepts it
    )


async def test_custom_object_round_trips_with_structural_defaults_and_pruning(
    admin_api_client: Any, namespace: str
) -> None:
    api = client.CustomObjectsApi(admin_api_client)
    body = leaderworkerset("defaulted", [{"name": "main", "image": "busybox"}])
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {"a": "b"},
        "uid": "pruned",
    }

    await api.create_namespaced_custom_object(**LWS, namespace=namespace, body=body)
    stored = await api.get_namespaced_custom_object(**LWS, namespace=namespace, name="defaulted")

    spec = stored["spec"]
    assert spec["replicas"] == 1
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["leaderWorkerTemplate"]["size"] == 1
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["leaderWorkerTemplate"]["workerTemplate"]["metadata"] == {"labels": {"a": "b"}}
    assert spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"] == [
        {"name": "main", "image": "busybox"}
    ]


async def test_server_side_apply_merges_containers_by_name_across_field_managers(
    admin_api_client: Any, namespace: str
) -> None:
    api = client.CustomObjectsApi(admin_api_client)
    await apply(api, namespace, leaderworkerset("merged", [{"name": "server", "image": "vllm:1"}]), "llmaz")
    await apply(api, namespace, leaderworkerset("merged", [{"name": "sidecar", "image": "envoy:1"}]), "other")

    updated = await apply(api, namespace, leaderworkerset("merged", [{"name": "server", "image": "vllm:2"}]), "llmaz")

    containers = updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert {c["name"]: c["image"] for c in containers} == {"server": "vllm:2", "sidecar": "envoy:1"}
    managers = {entry["manager"] for entry in updated["metadata"]["managedFields"]}
    assert {"llmaz", "other"} <= managers


async def test_server_side_apply_removes_entries_the_manager_no_longer_applies(
    admin_api_client: Any, namespace: str
) -> None:
    api = client.CustomObjectsApi(admin_api_client)
    both = [{"name": "server", "image": "vllm:1"}, {"name": "helper", "image": "busybox"}]
    await apply(api, namespace, leaderworkerset("shrunk", both), "llmaz")

    updated = await apply(api, namespace, leaderworkerset("shrunk", both[:1]), "llmaz")

    containers = updated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["server"]


async def test_watch_from_a_resource_version_streams_added_modified_deleted(
    admin_api_client: Any, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api_client)
    listed = await core.list_namespaced_config_map(namespace)
    events: list[tuple[str, str]] = []

    async def collect() -> None:
        stream = watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=listed.metadata.resource_version
        )
        async for event in stream:
            events.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                return

    watcher = asyncio.create_task(collect())
    # The stubs want models for bodies; the client serialises a plain dict the same way.
    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "watched"}})  # type: ignore[arg-type]
    await core.patch_namespaced_config_map("watched", namespace, {"data": {"k": "v"}})
    await core.delete_namespaced_config_map("watched", namespace)
    await asyncio.wait_for(watcher, timeout=15)

    assert events == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


async def test_service_account_token_is_denied_until_a_role_binding_grants_access(
    control_plane: Cluster, namespace: str, admin_api_client: Any
) -> None:
    token = control_plane.service_account_token(namespace, "reader")
    configuration = client.Configuration(host=control_plane.server)
    configuration.ssl_ca_cert = str(control_plane.ca_file)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}

    async with client.ApiClient(configuration) as as_reader:
        with pytest.raises(ApiException) as denied:
            await client.CoreV1Api(as_reader).list_namespaced_config_map(namespace)
        assert denied.value.status == 403

        await grant_configmap_reading(admin_api_client, namespace, "reader")

        async def listed() -> Any:
            try:
                return await client.CoreV1Api(as_reader).list_namespaced_config_map(namespace)
            except ApiException as error:
                if error.status != 403:
                    raise
                return None

        # The RBAC authorizer reads bindings from an informer: a new one takes effect within moments, not at once.
        allowed = await eventually(listed, within=5, interval=0.1, what="the new RoleBinding to allow the list")

    assert allowed.kind == "ConfigMapList"


async def grant_configmap_reading(api_client: Any, namespace: str, service_account: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
    # The stubs want V1Role and V1RoleBinding bodies; the client serialises plain dicts the same way.
    await rbac.create_namespaced_role(namespace, {"metadata": {"name": "read"}, "rules": [rule]})  # type: ignore[arg-type]
    binding = {
        "metadata": {"name": "read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read"},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    await rbac.create_namespaced_role_binding(namespace, binding)  # type: ignore[arg-type]
