"""`kubectl apply --server-side -k config/default` installs everything llmaz's kustomize layout does, with the names
users rely on."""

from __future__ import annotations

from typing import Any

from llmaz.controllers.settings import parse_global_config
from llmaz_dev.envtest import ControlPlane

from .conftest import NAMESPACE, Install


def _get(cluster: ControlPlane, path: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.admin_client().request("GET", path)
    return found


def test_a_server_dry_run_then_server_side_apply_of_config_default_succeeds(install: Install) -> None:
    dry_lines = [line for line in install.dry_run_output.splitlines() if line]
    applied_lines = [line for line in install.apply_output.splitlines() if line]
    assert dry_lines
    assert all(line.endswith("serverside-applied (server dry run)") for line in dry_lines)
    assert all(line.endswith("serverside-applied") for line in applied_lines)
    assert len(applied_lines) == len(dry_lines)


def test_the_manager_deployment_runs_as_its_service_account_with_probes_limits_and_a_locked_down_container(
    cluster: ControlPlane, install: Install
) -> None:
    deployment = _get(cluster, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/llmaz-controller-manager")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["serviceAccountName"] == "llmaz-controller-manager"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081, "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8081, "scheme": "HTTP"}
    assert set(container["resources"]) == {"limits", "requests"}
    assert {"--leader-elect", f"--namespace={NAMESPACE}", "--metrics-bind-address=:8443"} <= set(container["args"])


def test_services_route_webhooks_443_to_9443_and_metrics_on_8443(cluster: ControlPlane, install: Install) -> None:
    services = f"/api/v1/namespaces/{NAMESPACE}/services"
    webhook = _get(cluster, f"{services}/llmaz-webhook-service")["spec"]["ports"]
    metrics = _get(cluster, f"{services}/llmaz-controller-manager-metrics-service")["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in webhook] == [(443, 9443)]
    assert [(p["name"], p["port"], p["targetPort"]) for p in metrics] == [("https", 8443, 8443)]


def test_both_webhook_configurations_call_the_webhook_service(cluster: ControlPlane, install: Install) -> None:
    for kind in ("mutating", "validating"):
        configuration = _get(
            cluster,
            f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/llmaz-{kind}-webhook-configuration",
        )
        services = {(w["clientConfig"]["service"]["namespace"], w["clientConfig"]["service"]["name"])
                    for w in configuration["webhooks"]}  # fmt: skip
        assert len(configuration["webhooks"]) == 4
        assert services == {(NAMESPACE, "llmaz-webhook-service")}


def test_the_global_config_is_valid_and_the_cert_secret_awaits_the_manager(
    cluster: ControlPlane, install: Install
) -> None:
    config_map = _get(cluster, f"/api/v1/namespaces/{NAMESPACE}/configmaps/llmaz-global-config")
    settings = parse_global_config(config_map)
    assert settings.init_container_image == "llmaz-model-loader:v0.1.0"
    assert settings.scheduler_name == "default-scheduler"
    secret = _get(cluster, f"/api/v1/namespaces/{NAMESPACE}/secrets/llmaz-webhook-server-cert")
    assert not secret.get("data")


def test_the_default_backend_runtimes_keep_their_unprefixed_names(cluster: ControlPlane, install: Install) -> None:
    backends = _get(cluster, "/apis/inference.llmaz.io/v1alpha1/backendruntimes")["items"]
    assert sorted(b["metadata"]["name"] for b in backends) == [
        "llamacpp", "ollama", "sglang", "tensorrt-llm", "tgi", "vllm",
    ]  # fmt: skip
