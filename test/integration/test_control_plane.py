"""The control plane itself: readiness, pinned version, CRDs, restart and etcd compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from llmaz_dev.envtest import ControlPlane, find_assets, kubernetes_version
from llmaz_dev.envtest._crds import load_crds

REPO = Path(__file__).resolve().parents[2]


def test_control_plane_reports_ready_and_serves_the_pinned_kubernetes_version(
    control_plane: ControlPlane,
) -> None:
    admin = control_plane.admin_client()

    assert admin.get_text("/readyz") == "ok"
    assert admin.request("GET", "/version")["gitVersion"] == kubernetes_version()


def test_kubectl_is_the_pinned_release_and_targets_the_control_plane(control_plane: ControlPlane) -> None:
    version = control_plane.kubectl("version", "-o", "json")

    assert f'"gitVersion": "{kubernetes_version()}"' in version
    assert control_plane.kubectl("get", "namespace", "default", "-o", "name").strip() == "namespace/default"


def test_every_installed_crd_is_established(control_plane: ControlPlane) -> None:
    lws_crd = find_assets().lws_crd
    assert lws_crd is not None
    expected = {crd["metadata"]["name"] for crd in load_crds([REPO / "config/crd/bases", lws_crd])}

    crds = control_plane.admin_client().request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")

    established = {
        crd["metadata"]["name"]
        for crd in crds["items"]
        if {"type": "Established", "status": "True"}.items() <= _condition(crd, "Established").items()
    }
    assert "leaderworkersets.leaderworkerset.x-k8s.io" in expected
    assert expected <= established


def _condition(crd: dict[str, Any], condition_type: str) -> dict[str, Any]:
    return next((c for c in crd["status"]["conditions"] if c["type"] == condition_type), {})


def test_restarting_the_apiserver_keeps_the_data_and_the_address(control_plane: ControlPlane, namespace: str) -> None:
    server_before = control_plane.server
    control_plane.kubectl("create", "configmap", "survivor", "-n", namespace, "--from-literal=key=value")

    control_plane.restart_apiserver()

    assert control_plane.server == server_before
    assert control_plane.admin_client().get_text("/readyz") == "ok"
    survivor = control_plane.admin_client().request("GET", f"/api/v1/namespaces/{namespace}/configmaps/survivor")
    assert survivor["data"] == {"key": "value"}


async def test_compacting_etcd_expires_older_resource_versions(
    control_plane: ControlPlane, namespace: str, admin_api_client: Any
) -> None:
    core = client.CoreV1Api(admin_api_client)
    # The stub wants a V1ConfigMap body; the client serialises a plain dict the same way.
    created = await core.create_namespaced_config_map(namespace, {"metadata": {"name": "old"}})  # type: ignore[arg-type]
    old_version = created.metadata.resource_version
    for i in range(3):
        await core.patch_namespaced_config_map("old", namespace, {"data": {"n": str(i)}})

    control_plane.compact_etcd()

    with pytest.raises(ApiException) as expired:
        async for _event in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=old_version, timeout_seconds=5
        ):
            pass
    assert expired.value.status == 410
