"""metrics-server as the node tier runs it, without the node: the same binary, command line, certificates and RBAC
against a loopback control plane started with the node's aggregator flags.

What the node adds is only the route: kube-apiserver reaches metrics-server at the bridge address through the
APIService (an EndpointSlice may not name a loopback address). Here the test plays kube-apiserver's aggregator
instead: it calls metrics-server with the front-proxy client certificate, verifying metrics-server's certificate
for `metrics-server.kube-system.svc` against the cluster CA (the APIService's caBundle), and asserts the user in
X-Remote-User as the aggregator does. Scraping kubelet needs the node and is left to the node tier.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from llmaz.certs import pki
from llmaz_dev.envtest import ControlPlane
from llmaz_dev.envtest._pki import ControlPlanePKI
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.envtest._rest import APPLY_CONTENT_TYPE
from llmaz_dev.envtest.node import _metrics
from llmaz_dev.envtest.node._assets import find_node_assets
from llmaz_dev.envtest.node._layout import NodeLayout, NodePorts
from llmaz_dev.envtest.node.cluster import _manifest_path
from llmaz_dev.testing.waiting import eventually_sync

# The HPA controller's own identity (kube-controller-manager with service-account credentials): kube-apiserver's
# bootstrap RBAC lets it list metrics.k8s.io pods.
HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
PODS = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"
NODES = "/apis/metrics.k8s.io/v1beta1/nodes"


class AggregatingControlPlane(ControlPlane):
    """A loopback control plane with the node tier's aggregator flags."""

    def __init__(self, layout: NodeLayout) -> None:
        super().__init__()
        self.layout = layout
        self.metrics_pki: _metrics.MetricsPKI | None = None

    def _apiserver_args(self, pki_paths: ControlPlanePKI) -> list[str]:
        ca = pki.KeyPair(pki_paths.ca_cert.read_bytes(), pki_paths.ca_key.read_bytes())
        self.metrics_pki = _metrics.write_pki(pki_paths.ca_cert.parent / "aggregation", ca, self.layout)
        return [*super()._apiserver_args(pki_paths), *_metrics.aggregator_args(self.metrics_pki)]


@dataclass(frozen=True)
class Running:
    plane: AggregatingControlPlane
    paths: _metrics.MetricsPKI
    port: int


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    binary = find_node_assets().metrics_server
    work = tmp_path_factory.mktemp("metrics-server")
    # A layout whose "bridge" is loopback: metrics-server listens where this test can reach it.
    (port,) = free_loopback_ports(1)
    layout = NodeLayout(root=work / "node", pod_cidr="127.0.0.0/8", ports=NodePorts(metrics_server=port))
    assert layout.host_ip == "127.0.0.1"
    with AggregatingControlPlane(layout) as plane:
        paths = plane.metrics_pki
        assert paths is not None
        admin = plane.admin_client()
        for manifest in _metrics.metrics_server_manifests(layout):
            if manifest["kind"] not in {"Service", "EndpointSlice"}:  # the route: the node's alone
                admin.apply(_manifest_path(manifest), manifest, "llmaz-test")
        eventually_sync(
            lambda: admin.request("POST", _metrics.ACCESS_REVIEWS, _metrics.startup_access_review())["status"].get(
                "allowed"
            ),
            what="metrics-server's RBAC to take effect",
        )
        user = {"client-certificate": str(paths.client_cert), "client-key": str(paths.client_key)}
        kubeconfig = plane.write_kubeconfig(work / "metrics-server.kubeconfig", user, _metrics.NAME)
        argv = [str(binary), *_metrics.metrics_server_args(layout, paths, kubeconfig, plane.ca_file)]
        process = ManagedProcess(_metrics.NAME, argv, work / "metrics-server.log")
        process.start()
        try:
            running = Running(plane, paths, port)

            def live() -> bool:
                if process.exit_code() is not None:
                    raise RuntimeError(f"metrics-server exited ({process.exit_code()}):\n{process.log_tail()}")
                try:
                    return call(running, "/livez", client_cert=False)[0] == 200
                except OSError:
                    return False

            eventually_sync(live, within=60, what="metrics-server /livez")

            # Its first requests after start are anonymous for a moment, then the front proxy is trusted (the
            # aggregator's availability check retries the same way). An administrator needs no access review.
            def trusts_the_front_proxy() -> bool:
                return call(running, NODES, headers=as_user("someone", "system:masters"))[0] == 200

            eventually_sync(trusts_the_front_proxy, what="metrics-server to trust the front proxy")
            yield running
        finally:
            process.stop()


def call(
    running: Running, path: str, *, client_cert: bool = True, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """GET `path` from metrics-server as kube-apiserver's aggregator does: its certificate verified for the
    Service's name against the cluster CA, with the front-proxy client certificate unless `client_cert` is off."""
    context = ssl.create_default_context(cafile=running.plane.ca_file)
    if client_cert:
        context.load_cert_chain(running.paths.front_proxy_client_cert, running.paths.front_proxy_client_key)
    server_name = _metrics.service_dns_names()[0]
    connection = http.client.HTTPSConnection(server_name, running.port, context=context, timeout=10)
    connection.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", running.port), timeout=10), server_hostname=server_name
    )
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def as_user(user: str, *groups: str) -> dict[str, str]:
    headers = {"X-Remote-User": user}
    if groups:
        headers["X-Remote-Group"] = ",".join(groups)
    return headers


def test_kube_apiserver_publishes_the_front_proxy_ca_metrics_server_trusts(metrics_server: Running) -> None:
    admin = metrics_server.plane.admin_client()
    published = admin.request("GET", "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
    data = published["data"]
    assert data["requestheader-client-ca-file"].strip() == metrics_server.paths.front_proxy_ca.read_text().strip()
    assert json.loads(data["requestheader-allowed-names"]) == ["front-proxy-client"]


def test_the_hpa_controller_reads_pod_metrics_through_the_front_proxy(metrics_server: Running) -> None:
    status, body = call(metrics_server, PODS, headers=as_user(HPA_CONTROLLER, "system:serviceaccounts"))
    assert status == 200, body
    answer: dict[str, Any] = json.loads(body)
    assert answer["kind"] == "PodMetricsList"
    assert answer["items"] == []  # no node, no pod: nothing scraped


def test_metrics_server_asks_kube_apiserver_whether_a_user_may_read_metrics(metrics_server: Running) -> None:
    status, body = call(metrics_server, PODS, headers=as_user("nobody"))
    assert status == 403, body
    assert 'User "nobody" cannot list resource "pods" in API group "metrics.k8s.io"' in json.loads(body)["message"]


def test_only_the_front_proxy_may_name_the_user(metrics_server: Running) -> None:
    status, body = call(metrics_server, PODS, client_cert=False, headers=as_user(HPA_CONTROLLER))
    assert status == 403, body
    assert 'User "system:anonymous" cannot list' in json.loads(body)["message"]


def test_the_objects_the_node_applies_pass_the_server_dry_run(metrics_server: Running) -> None:
    layout = NodeLayout()  # the node's own addresses: what an EndpointSlice may name
    admin = metrics_server.plane.admin_client()
    manifests = [
        *_metrics.metrics_server_manifests(layout),
        _metrics.api_service(metrics_server.plane.ca_file.read_bytes()),
    ]
    for manifest in manifests:
        query = {"fieldManager": "llmaz-test", "force": "true", "dryRun": "All"}
        applied = admin.request(
            "PATCH", _manifest_path(manifest), manifest, content_type=APPLY_CONTENT_TYPE, query=query
        )
        assert (applied["kind"], applied["metadata"]["name"]) == (manifest["kind"], manifest["metadata"]["name"])
