"""What the simulated cluster registers and configures, without starting anything."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from llmaz_dev.envtest.simulated import GPU_PRODUCT_LABEL, GPU_RESOURCE, NodePool, _components, _lws, default_node_pools
from llmaz_dev.envtest.simulated.nodes import KWOK_ANNOTATION, node_manifests


def test_the_default_pools_have_eight_gpu_a100_nodes_two_gpu_a10_nodes_and_cpu_only_nodes() -> None:
    nodes = {node["metadata"]["name"]: node for node in node_manifests(default_node_pools())}

    assert sorted(nodes) == ["cpu-0", "cpu-1", "gpu-a10-0", "gpu-a10-1", "gpu-a100-0", "gpu-a100-1"]
    assert nodes["gpu-a100-0"]["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert nodes["gpu-a100-0"]["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
    assert nodes["gpu-a10-1"]["status"]["capacity"][GPU_RESOURCE] == "2"
    assert GPU_RESOURCE not in nodes["cpu-0"]["status"]["allocatable"]
    assert GPU_PRODUCT_LABEL not in nodes["cpu-0"]["metadata"]["labels"]


def test_every_node_is_kwok_managed_untainted_and_gets_its_own_pod_cidr() -> None:
    nodes = node_manifests([NodePool("a", 3), NodePool("b", 2, {"zone": "z"}, {"example.com/fpga": "1"})])

    assert all(node["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"} for node in nodes)
    assert all(node["metadata"]["labels"]["type"] == "kwok" for node in nodes)
    assert all("taints" not in node["spec"] for node in nodes)
    assert len({node["spec"]["podCIDR"] for node in nodes}) == 5
    assert nodes[4]["status"]["allocatable"]["example.com/fpga"] == "1"
    assert nodes[4]["metadata"]["labels"]["zone"] == "z"


def test_more_nodes_than_pod_cidrs_or_colliding_names_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 256"):
        node_manifests([NodePool("big", 257)])
    with pytest.raises(ValueError, match="collide"):
        node_manifests([NodePool("a", 1), NodePool("a", 1)])


def test_lws_webhooks_are_called_by_url_with_the_generated_ca_and_pods_only_when_they_belong_to_an_lws(
    tmp_path: Path,
) -> None:
    ca_pem = _lws.write_serving_certificate(tmp_path)
    serving = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert serving.issuer == x509.load_pem_x509_certificate(ca_pem).subject

    mutating, validating = _lws.webhook_configurations(40000, ca_pem)

    assert (mutating["kind"], validating["kind"]) == ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    hooks = {hook["name"]: hook for hook in mutating["webhooks"] + validating["webhooks"]}
    assert hooks["mpod.kb.io"]["clientConfig"]["url"] == "https://127.0.0.1:40000/mutate--v1-pod"
    assert hooks["vleaderworkerset.kb.io"]["clientConfig"]["url"].endswith(
        "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset"
    )
    assert all(base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem for hook in hooks.values())
    assert hooks["mpod.kb.io"]["objectSelector"]["matchExpressions"][0]["key"] == "leaderworkerset.sigs.k8s.io/name"
    assert "objectSelector" not in hooks["mleaderworkerset.kb.io"]


def test_the_lws_controller_configuration_turns_off_its_cert_management_and_leader_election(tmp_path: Path) -> None:
    path = _lws.write_configuration(tmp_path / "config.yaml", 40000, 40001, tmp_path / "certs")

    config = yaml.safe_load(path.read_text())

    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 40000, "certDir": str(tmp_path / "certs")}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:40001"


def test_the_controller_manager_runs_the_controllers_llmaz_relies_on_with_the_service_account_key() -> None:
    args = _components.controller_manager_args(Path("k"), 1, Path("c"), Path("sa.key"), Path("ca.crt"))

    controllers = next(a for a in args if a.startswith("--controllers=")).split("=", 1)[1].split(",")
    for needed in (
        "garbage-collector-controller",
        "statefulset-controller",
        "endpointslice-controller",
        "horizontal-pod-autoscaler-controller",
        "namespace-controller",
        "serviceaccount-token-controller",
    ):
        assert needed in controllers
    assert "--service-account-private-key-file=sa.key" in args
    assert "--leader-elect=false" in args
