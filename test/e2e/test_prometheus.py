"""llmaz's metrics really scraped by Prometheus on the node, as a user running the Prometheus Operator gets them.

The operator is its release's bundle (CRDs, RBAC, Deployment) with the operator and config reloader built here from
their Go module; Prometheus, built here from its Go module too, is run by the operator as kube-prometheus runs it
(`monitoring/prometheus-k8s`). llmaz adds only what a user adds: `kubectl apply --server-side -k config/prometheus`,
its ServiceMonitor and the binding of llmaz's metrics reader to that ServiceAccount. The same Prometheus also
carries config/prometheus/scrape-config.yaml, the scrape config docs/prometheus.md gives for a Prometheus without
the operator. What is checked is Prometheus's own word, its HTTP API: through either, both manager replicas are
targets that are up, scraped over HTTPS with the ServiceAccount's token, and their reconcile and webhook latency
series are stored.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import ClusterOperationError
from llmaz_dev.envtest.images import find_images
from llmaz_dev.envtest.prometheus import (
    NAMESPACE,
    POD,
    PORT,
    PROMETHEUS_IMAGES,
    operator_bundle,
    operator_manifests,
    prometheus_manifests,
)

from .conftest import REPO
from .managers import NAMESPACE as LLMAZ_NAMESPACE
from .serving import node_of
from .support import Environment, ModelNames, eventually, http_request, open_model, pod_ready

pytestmark = pytest.mark.tier("node")
MONITOR = REPO / "config" / "prometheus"
SCRAPE_CONFIG = MONITOR / "scrape-config.yaml"
# Prometheus names a ServiceMonitor's scrape pool serviceMonitor/<namespace>/<name>/<endpoint index>, and a plain
# scrape config's after its job.
SCRAPE_POOLS = {
    "ServiceMonitor": f"serviceMonitor/{LLMAZ_NAMESPACE}/llmaz-controller-manager-metrics-monitor/0",
    "scrape-config.yaml": "llmaz-controller-manager",
}
JOB = "llmaz-controller-manager-metrics-service"  # the ServiceMonitor's job: the Service's name


@pytest.fixture(scope="module")
def prometheus(e2e: Environment) -> Iterator[str]:
    """The base URL of a running Prometheus's API, with the operator and config/prometheus installed; all of it is
    removed afterwards, CRDs included."""
    images = find_images(PROMETHEUS_IMAGES)
    node_of(e2e).import_images(list(images.values()))
    operator = operator_manifests(
        operator_bundle().read_text(), images["prometheus-operator"].image, images["prometheus-config-reloader"].image
    )
    server = prometheus_manifests(images["prometheus"].image, scrape_configs=SCRAPE_CONFIG.read_text())
    try:
        e2e.apply(operator)
        e2e.kubectl("wait", "--for=condition=Established", "--timeout=60s", *_crd_names(operator))
        e2e.kubectl("rollout", "status", "deployment/prometheus-operator", "-n", "default", "--timeout=180s")
        e2e.apply(server)
        print(e2e.kubectl("apply", "--server-side", "-k", str(MONITOR)))
        pod = eventually(lambda: _ready_pod(e2e), within=240, what=f"pod {NAMESPACE}/{POD} Ready")
        yield f"http://{pod['status']['podIP']}:{PORT}"
    finally:
        for documents in (server[::-1], yaml.safe_load_all(e2e.kubectl("kustomize", str(MONITOR))), operator[::-1]):
            with contextlib.suppress(ClusterOperationError):
                e2e.kubectl(
                    "delete", "--ignore-not-found", "--wait", "--timeout=180s", "-f", "-",
                    input=yaml.safe_dump_all([doc for doc in documents if doc]),
                )  # fmt: skip


@pytest.mark.parametrize("source", list(SCRAPE_POOLS))
def test_prometheus_scrapes_both_manager_replicas_over_https_with_its_service_account_token(
    e2e: Environment, prometheus: str, source: str
) -> None:
    pool = SCRAPE_POOLS[source]
    targets = eventually(lambda: _up_targets(prometheus, pool), within=180, what=f"two llmaz targets up in {pool}")
    pods = e2e.items("pods", LLMAZ_NAMESPACE, "control-plane=controller-manager")
    managers = {pod["status"]["podIP"] for pod in pods}
    for target in targets:
        url = urllib.parse.urlsplit(target["scrapeUrl"])
        assert (url.scheme, url.port, url.path) == ("https", 8443, "/metrics"), target["scrapeUrl"]
        assert url.hostname in managers, f"{target['scrapeUrl']} is not a manager pod ({sorted(managers)})"
        assert target["lastError"] == "", target
        print(f"{source}: {target['scrapeUrl']} {target['health']}, scraped in {target['lastScrapeDuration']:.3f} s")


def test_prometheus_stores_the_reconcile_and_webhook_latency_series(
    e2e: Environment, prometheus: str, models: ModelNames
) -> None:
    model = models.new("scraped")
    e2e.apply([open_model(model)])  # one admission through the OpenModel webhooks, at least
    reconciles = eventually(
        lambda: _query(prometheus, f'sum by (controller) (controller_runtime_reconcile_total{{job="{JOB}"}})'),
        within=120,
        what="controller_runtime_reconcile_total in Prometheus",
    )
    counted = {series["metric"]["controller"]: float(series["value"][1]) for series in reconciles}
    assert any(count > 0 for count in counted.values()), counted
    path = "/mutate-llmaz-io-v1alpha1-openmodel"
    latency = eventually(
        lambda: _query(
            prometheus,
            f'sum(controller_runtime_webhook_latency_seconds_count{{job="{JOB}",webhook="{path}"}}) > 0',
        ),
        within=120,
        what=f"controller_runtime_webhook_latency_seconds of {path} in Prometheus",
    )
    buckets = _query(prometheus, f'controller_runtime_webhook_latency_seconds_bucket{{job="{JOB}",webhook="{path}"}}')
    assert buckets is not None
    assert {series["metric"]["le"] for series in buckets} >= {"1e-08", "+Inf"}, buckets
    print(f"reconciles by controller: {counted}; admissions of {path}: {latency[0]['value'][1]}")


def _crd_names(documents: list[dict[str, Any]]) -> list[str]:
    return [f"crd/{doc['metadata']['name']}" for doc in documents if doc["kind"] == "CustomResourceDefinition"]


def _ready_pod(e2e: Environment) -> dict[str, Any] | None:
    pod = e2e.get("pods", POD, NAMESPACE)
    return pod if pod is not None and pod_ready(pod) else None


def _api(prometheus: str, path: str, query: dict[str, str] | None = None) -> Any:
    url = f"{prometheus}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    status, body = http_request(url)
    assert status == 200, f"GET {url}: {status} {body[:500]!r}"
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]


def _up_targets(prometheus: str, pool: str) -> list[dict[str, Any]] | None:
    targets = [t for t in _api(prometheus, "/api/v1/targets")["activeTargets"] if t["scrapePool"] == pool]
    return targets if len(targets) == 2 and all(t["health"] == "up" for t in targets) else None


def _query(prometheus: str, expression: str) -> list[dict[str, Any]] | None:
    result: list[dict[str, Any]] = _api(prometheus, "/api/v1/query", {"query": expression})["result"]
    return result or None
