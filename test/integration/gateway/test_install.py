"""Enabling the gateway is one line in config/default, and what it then installs is valid for the API server."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from llmaz_dev.envtest import Cluster

from .conftest import REPO

ENABLE = "components: [../gateway]"


def _built_with_the_gateway(cluster: Cluster, scratch: Path) -> list[dict[str, Any]]:
    config = scratch / "config"
    shutil.copytree(REPO / "config", config)
    kustomization = config / "default" / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count(f"# {ENABLE}\n") == 1
    kustomization.write_text(text.replace(f"# {ENABLE}\n", f"{ENABLE}\n"))
    return [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(config / "default"))) if d]


def test_uncommenting_the_line_adds_the_gateway_prefixed_in_llmaz_system_and_it_passes_a_server_dry_run(
    control_plane: Cluster, namespace: str, tmp_path: Path
) -> None:
    built = _built_with_the_gateway(control_plane, tmp_path)
    gateway = {f"{d['kind']}/{d['metadata']['name']}": d for d in built if "gateway" in d["metadata"]["name"]}
    assert sorted(gateway) == [
        "ClusterRole/llmaz-gateway-role",
        "ClusterRoleBinding/llmaz-gateway-rolebinding",
        "Deployment/llmaz-gateway",
        "PodDisruptionBudget/llmaz-gateway",
        "Role/llmaz-gateway-role",
        "RoleBinding/llmaz-gateway-rolebinding",
        "Service/llmaz-gateway",
        "Service/llmaz-gateway-epp",
        "Service/llmaz-gateway-metrics",
        "ServiceAccount/llmaz-gateway",
        "ValidatingAdmissionPolicy/llmaz-gateway-writes",
        "ValidatingAdmissionPolicyBinding/llmaz-gateway-writes",
    ]
    deployment = gateway["Deployment/llmaz-gateway"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["metadata"]["namespace"] == "llmaz-system"
    assert pod["serviceAccountName"] == "llmaz-gateway"
    assert pod["containers"][0]["image"] == "controller:latest"  # `make deploy` replaces `controller`
    # The Endpoint Picker serves on 9002, behind llmaz-gateway-epp (plain-text HTTP/2 gRPC).
    assert "--epp-port=9002" in pod["containers"][0]["args"]
    assert {"name": "epp", "containerPort": 9002, "protocol": "TCP"} in pod["containers"][0]["ports"]
    epp = gateway["Service/llmaz-gateway-epp"]["spec"]
    assert epp["ports"] == [
        {"name": "grpc", "port": 9002, "protocol": "TCP", "targetPort": "epp", "appProtocol": "kubernetes.io/h2c"}
    ]
    assert epp["selector"] == gateway["Service/llmaz-gateway"]["spec"]["selector"]
    policy_binding = gateway["ValidatingAdmissionPolicyBinding/llmaz-gateway-writes"]
    assert policy_binding["spec"]["policyName"] == "llmaz-gateway-writes"
    assert "namespace" not in policy_binding["metadata"]  # cluster-scoped
    binding = gateway["ClusterRoleBinding/llmaz-gateway-rolebinding"]
    assert binding["roleRef"]["name"] == "llmaz-gateway-role"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llmaz-gateway", "namespace": "llmaz-system"}]
    # The manager's objects are untouched by the component.
    assert {f"{d['kind']}/{d['metadata']['name']}" for d in built} >= {"Deployment/llmaz-controller-manager"}

    # Validated by the API server in a scratch namespace (a dry run persists nothing, cluster-scoped included).
    for doc in gateway.values():
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
    binding["subjects"][0]["namespace"] = namespace
    out = control_plane.kubectl(
        "apply", "--server-side", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(gateway.values())
    )
    assert len([line for line in out.splitlines() if line.endswith("serverside-applied (server dry run)")]) == len(
        gateway
    )
