"""The node tier's Prometheus manifests: the operator's release bundle with local images, and the scraping server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import AssetsMissingError
from llmaz_dev.envtest._assets import module_version
from llmaz_dev.envtest.prometheus import (
    NAMESPACE,
    PROMETHEUS_MODULE,
    SERVICE_ACCOUNT,
    operator_bundle,
    operator_manifests,
    prometheus_manifests,
    prometheus_release,
    prometheus_version,
    promtool,
)

REPO = Path(__file__).resolve().parents[3]
OPERATOR = "llmaz.local/prometheus-operator:v0.85.0"
RELOADER = "llmaz.local/prometheus-config-reloader:v0.85.0"


def bundle(args: list[str], *, name: str = "prometheus-operator") -> str:
    """The shape of the release's bundle.yaml: a CRD, the operator's Deployment and its Service."""
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "x"},
            "spec": {"enum": ["=", "!="]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "prometheus-operator", "image": "quay.io/op:v0.85.0", "args": args},
                        ]
                    }
                }
            },
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}},
    ]
    return yaml.safe_dump_all(documents)


def test_the_operator_runs_the_local_images_and_keeps_its_other_arguments() -> None:
    args = ["--kubelet-service=kube-system/kubelet", "--prometheus-config-reloader=quay.io/r:v0.85.0", "--x=1"]

    documents = operator_manifests(bundle(args), OPERATOR, RELOADER)

    assert [doc["kind"] for doc in documents] == ["CustomResourceDefinition", "Deployment", "Service"]
    assert documents[0]["spec"]["enum"] == ["=", "!="]
    (container,) = documents[1]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == OPERATOR
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"] == [args[0], f"--prometheus-config-reloader={RELOADER}", args[2]]


def test_a_bare_equals_sign_is_the_string_kubernetes_reads_and_stays_one_when_dumped() -> None:
    text = bundle(["--prometheus-config-reloader=a"]).replace("- '='", "- =")
    assert "- =\n" in text, "the release's CRDs have a bare `=`, which PyYAML's safe loader cannot read"

    documents = operator_manifests(text, OPERATOR, RELOADER)

    assert documents[0]["spec"]["enum"] == ["=", "!="]
    assert next(iter(yaml.safe_load_all(yaml.safe_dump_all(documents))))["spec"]["enum"] == ["=", "!="]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (bundle(["--prometheus-config-reloader=a"], name="other"), "0 Deployments named prometheus-operator"),
        (bundle(["--log-level=info"]), "name the config reloader 0 times"),
        (bundle(["--prometheus-config-reloader=a", "--prometheus-config-reloader=b"]), "2 times"),
    ],
)
def test_a_bundle_of_another_shape_is_an_error_not_a_silent_upstream_image(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        operator_manifests(text, OPERATOR, RELOADER)


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("llmaz.local/prometheus:v2.42.0", "v2.42.0"),
        ("localhost:5000/prometheus:v3.1.10", "v3.1.10"),
    ],
)
def test_the_prometheus_version_is_the_image_tag(image: str, version: str) -> None:
    assert prometheus_version(image) == version


@pytest.mark.parametrize(
    "image",
    ["llmaz.local/prometheus", "localhost:5000/prometheus", "p:2.42.0", "p:v2.42", "p:v2.42.0-rc.1", "p:latest"],
)
def test_a_tag_that_is_not_a_release_is_refused(image: str) -> None:
    with pytest.raises(ValueError, match="must be the Prometheus release"):
        prometheus_version(image)


def test_prometheus_runs_as_the_account_config_prometheus_binds_and_selects_every_service_and_pod_monitor() -> None:
    documents = {doc["kind"]: doc for doc in prometheus_manifests("llmaz.local/prometheus:v2.42.0")}

    spec = documents["Prometheus"]["spec"]
    assert (spec["image"], spec["version"]) == ("llmaz.local/prometheus:v2.42.0", "v2.42.0")
    assert spec["serviceMonitorSelector"] == {}
    assert spec["serviceMonitorNamespaceSelector"] == {}
    assert spec["podMonitorSelector"] == {}
    assert spec["podMonitorNamespaceSelector"] == {}
    assert documents["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]
    # config/prometheus binds llmaz's metrics reader to this very ServiceAccount.
    binding = yaml.safe_load((REPO / "config" / "prometheus" / "metrics_reader_binding.yaml").read_text())
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    verbs = {(group, resource) for rule in documents["ClusterRole"]["rules"] for group in rule["apiGroups"]
             for resource in rule["resources"] if "watch" in rule["verbs"]}  # fmt: skip
    assert {("", "services"), ("", "endpoints"), ("", "pods"), ("discovery.k8s.io", "endpointslices")} <= verbs


def test_raw_scrape_configs_reach_prometheus_through_a_secret_it_names() -> None:
    configs = "- job_name: x\n  static_configs: [{targets: ['a:1']}]\n"
    documents = {doc["kind"]: doc for doc in prometheus_manifests("p:v2.42.0", scrape_configs=configs)}

    selector = documents["Prometheus"]["spec"]["additionalScrapeConfigs"]
    secret = documents["Secret"]
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == (selector["name"], NAMESPACE)
    assert secret["stringData"] == {selector["key"]: configs}
    assert (
        "additionalScrapeConfigs"
        not in {doc["kind"]: doc for doc in prometheus_manifests("p:v2.42.0")}["Prometheus"]["spec"]
    )


def test_the_plain_scrape_config_keeps_the_servicemonitors_endpoint() -> None:
    """config/prometheus/scrape-config.yaml (Prometheus without the operator) scrapes what the ServiceMonitor does."""
    (config,) = yaml.safe_load((REPO / "config" / "prometheus" / "scrape-config.yaml").read_text())
    (endpoint,) = yaml.safe_load((REPO / "config" / "prometheus" / "monitor.yaml").read_text())["spec"]["endpoints"]
    assert (config["scheme"], config["metrics_path"]) == (endpoint["scheme"], endpoint["path"])
    assert config["authorization"]["credentials_file"] == endpoint["bearerTokenFile"]
    assert config["tls_config"]["insecure_skip_verify"] is endpoint["tlsConfig"]["insecureSkipVerify"]
    keep = next(rule for rule in config["relabel_configs"] if rule["action"] == "keep")
    assert keep["regex"] == f"llmaz-controller-manager-metrics-service;{endpoint['port']}"


def test_a_missing_bundle_names_the_command_that_builds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMAZ_CACHE", str(tmp_path))

    missing = r"prometheus-operator-v\d+\.\d+\.\d+/bundle\.yaml: run `make image-build`"
    with pytest.raises(AssetsMissingError, match=missing):
        operator_bundle()


@pytest.mark.parametrize(
    ("module", "release"), [("v0.305.0", "v3.5.0"), ("v0.310.2", "v3.10.2"), ("v0.300.1", "v3.0.1")]
)
def test_a_prometheus_module_version_names_its_release(module: str, release: str) -> None:
    assert prometheus_release(module) == release


def test_a_module_version_that_is_no_prometheus_3_release_is_refused() -> None:
    with pytest.raises(ValueError, match=r"v2\.53\.0 is not a Prometheus 3\.x module version"):
        prometheus_release("v2.53.0")


def test_promtool_is_found_beside_the_pinned_prometheus_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMAZ_CACHE", str(tmp_path))
    monkeypatch.delenv("PROMTOOL", raising=False)
    pinned = prometheus_release(module_version(REPO / "hack/cluster/prometheus/go.mod", PROMETHEUS_MODULE))
    built = tmp_path / "bin" / f"prometheus-{pinned}" / "promtool"
    with pytest.raises(AssetsMissingError, match=f"promtool not found at {built}: run `make image-build`"):
        promtool()
    built.parent.mkdir(parents=True)
    built.write_text("#!/bin/sh\n")
    built.chmod(0o755)
    assert promtool() == built
    monkeypatch.setenv("PROMTOOL", "/nowhere/promtool")
    with pytest.raises(AssetsMissingError, match="promtool not found at /nowhere/promtool"):
        promtool()
