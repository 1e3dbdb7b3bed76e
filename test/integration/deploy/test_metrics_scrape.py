"""A scrape configured exactly like config/prometheus' ServiceMonitor reads the installed manager's metrics.

The ServiceMonitor's endpoint (scheme, path, Service port name, bearer token, TLS settings) is read from the
built overlay and resolved against the installed metrics Service; the bearer token belongs to a ServiceAccount
bound to `llmaz-metrics-reader` by config/prometheus' binding (with the subject set to that account).
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import ControlPlane

from .conftest import NAMESPACE, REPO, RunningManager, documents


def _built(cluster: ControlPlane, overlay: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The overlay's objects by kind and name (config/prometheus holds a ServiceMonitor for the gateway too)."""
    built = documents(cluster.kubectl("kustomize", str(REPO / "config" / overlay)))
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in built}


def _scrape(url: str, token: str | None, tls: dict[str, Any]) -> tuple[int, str]:
    context = ssl.create_default_context()
    if tls.get("insecureSkipVerify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


@pytest.fixture(scope="module")
def scrape_url(cluster: ControlPlane, manager: RunningManager) -> tuple[str, dict[str, Any]]:
    """The ServiceMonitor's endpoint as a URL of the locally running manager, and its TLS settings."""
    monitor = _built(cluster, "prometheus")["ServiceMonitor", "llmaz-controller-manager-metrics-monitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    service = cluster.admin_client().request(
        "GET", f"/api/v1/namespaces/{NAMESPACE}/services/llmaz-controller-manager-metrics-service"
    )
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    container = cluster.admin_client().request(
        "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/llmaz-controller-manager"
    )["spec"]["template"]["spec"]["containers"][0]
    assert port["targetPort"] in {p["containerPort"] for p in container["ports"]}
    # The pod would listen on targetPort; the local manager listens on its own free port instead.
    return f"{endpoint['scheme']}://127.0.0.1:{manager.metrics_port}{endpoint['path']}", endpoint["tlsConfig"]


@pytest.fixture(scope="module")
def prometheus_token(cluster: ControlPlane) -> str:
    namespace = cluster.create_namespace("monitoring")
    binding = _built(cluster, "prometheus")["ClusterRoleBinding", "llmaz-metrics-reader-rolebinding"]
    binding["subjects"] = [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(binding))
    return cluster.service_account_token(namespace, "prometheus")


def test_a_servicemonitor_scrape_with_a_metrics_reader_token_gets_the_metrics(
    scrape_url: tuple[str, dict[str, Any]], prometheus_token: str
) -> None:
    url, tls = scrape_url
    status, body = _scrape(url, prometheus_token, tls)
    assert status == 200
    for family in (
        "controller_runtime_reconcile_total",
        "workqueue_depth",
        "rest_client_requests_total",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_gc_full_collection_duration_seconds_count",
    ):
        assert family in body


def test_a_scrape_without_the_binding_or_without_a_token_is_refused(
    cluster: ControlPlane, scrape_url: tuple[str, dict[str, Any]]
) -> None:
    url, tls = scrape_url
    stranger = cluster.service_account_token(cluster.create_namespace("stranger"), "stranger")
    assert _scrape(url, stranger, tls)[0] == 403
    assert _scrape(url, None, tls)[0] == 401
