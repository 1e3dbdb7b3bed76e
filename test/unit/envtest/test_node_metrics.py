"""The node tier's metrics-server: its certificates, its command line, kube-apiserver's aggregator flags and the
objects that register it, rendered without a node and checked against the rules kube-apiserver applies."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmaz.certs import pki
from llmaz_dev.envtest.node import _metrics
from llmaz_dev.envtest.node._layout import NodeLayout
from llmaz_dev.envtest.node.cluster import _manifest_path

LAYOUT = NodeLayout(root=Path("/var/lib/llmaz-node-test"))


@pytest.fixture(scope="module")
def cluster_ca() -> pki.KeyPair:
    return pki.new_ca(datetime.datetime.now(datetime.UTC), "unit-ca", new_key=pki.ec_key)


@pytest.fixture
def paths(tmp_path: Path, cluster_ca: pki.KeyPair) -> _metrics.MetricsPKI:
    return _metrics.write_pki(tmp_path / "aggregation", cluster_ca, LAYOUT)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def sans(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(names.get_values_for_type(x509.DNSName)), {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}


def usages(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def flags(argv: list[str]) -> dict[str, str]:
    return dict(arg.removeprefix("--").partition("=")[::2] for arg in argv)


def test_metrics_server_serves_a_certificate_of_the_cluster_ca_for_its_service_name_and_the_bridge_address(
    paths: _metrics.MetricsPKI, cluster_ca: pki.KeyPair
) -> None:
    serving = load(paths.serving_cert)
    serving.verify_directly_issued_by(x509.load_pem_x509_certificate(cluster_ca.cert_pem))
    dns, ips = sans(serving)
    # kube-apiserver's aggregator verifies `<service>.<namespace>.svc` against the APIService's caBundle.
    assert "metrics-server.kube-system.svc" in dns
    assert ips == {LAYOUT.host_ip}
    assert usages(serving) == {ExtendedKeyUsageOID.SERVER_AUTH}
    assert paths.serving_key.stat().st_mode & 0o777 == 0o600


def test_metrics_server_is_its_own_user_and_kube_apiserver_proxies_as_the_front_proxy_of_another_ca(
    paths: _metrics.MetricsPKI, cluster_ca: pki.KeyPair
) -> None:
    ca = x509.load_pem_x509_certificate(cluster_ca.cert_pem)
    client = load(paths.client_cert)
    client.verify_directly_issued_by(ca)
    assert common_name(client) == _metrics.USER
    assert usages(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}

    front_proxy_ca = load(paths.front_proxy_ca)
    front_proxy = load(paths.front_proxy_client_cert)
    front_proxy.verify_directly_issued_by(front_proxy_ca)
    assert common_name(front_proxy) == "front-proxy-client"
    # A cluster client certificate must never pass as the front proxy, which asserts any user it likes.
    assert front_proxy_ca.public_key() != ca.public_key()
    with pytest.raises(ValueError, match="does not match"):
        client.verify_directly_issued_by(front_proxy_ca)
    for key in (paths.front_proxy_client_key, paths.client_key):
        assert key.stat().st_mode & 0o777 == 0o600


def test_kubelet_serves_a_certificate_of_the_cluster_ca_for_the_address_metrics_server_dials(
    cluster_ca: pki.KeyPair,
) -> None:
    pair = _metrics.kubelet_serving_pair(cluster_ca, LAYOUT)
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(cluster_ca.cert_pem))
    assert sans(cert) == ({LAYOUT.node_name}, {LAYOUT.host_ip})
    assert usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH}


def test_kube_apiserver_trusts_only_its_own_front_proxy_and_routes_to_the_endpoints(
    paths: _metrics.MetricsPKI,
) -> None:
    args = flags(_metrics.aggregator_args(paths))
    assert args["requestheader-client-ca-file"] == str(paths.front_proxy_ca)
    assert args["proxy-client-cert-file"] == str(paths.front_proxy_client_cert)
    assert args["proxy-client-key-file"] == str(paths.front_proxy_client_key)
    assert args["requestheader-allowed-names"] == common_name(load(paths.front_proxy_client_cert))
    assert args["requestheader-username-headers"] == "X-Remote-User"
    assert args["requestheader-group-headers"] == "X-Remote-Group"
    assert args["requestheader-extra-headers-prefix"] == "X-Remote-Extra-"
    assert args["enable-aggregator-routing"] == "true"


def test_metrics_server_listens_on_the_bridge_and_verifies_kubelet(paths: _metrics.MetricsPKI, tmp_path: Path) -> None:
    argv = _metrics.metrics_server_args(LAYOUT, paths, tmp_path / "ms.kubeconfig", tmp_path / "ca.crt")
    args = flags(argv)
    assert args["bind-address"] == LAYOUT.host_ip
    assert args["secure-port"] == str(LAYOUT.ports.metrics_server)
    assert (args["tls-cert-file"], args["tls-private-key-file"]) == (str(paths.serving_cert), str(paths.serving_key))
    assert args["kubelet-certificate-authority"] == str(tmp_path / "ca.crt")
    assert "--kubelet-insecure-tls" not in argv
    assert args["kubelet-preferred-address-types"] == "InternalIP"
    kubeconfig = str(tmp_path / "ms.kubeconfig")
    assert [args["kubeconfig"], args["authentication-kubeconfig"], args["authorization-kubeconfig"]] == [kubeconfig] * 3
    # metrics-server refuses a resolution under 10 s, or a kubelet timeout over 90 % of it.
    assert args["metric-resolution"] == "10s"
    assert int(args["kubelet-request-timeout"].removesuffix("s")) <= 9


def by_kind(manifests: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


def test_metrics_server_rbac_grants_what_it_reads_from_kubelet_and_the_api_and_delegates_auth() -> None:
    objects = by_kind(_metrics.metrics_server_manifests(LAYOUT))
    role = objects["ClusterRole", _metrics.USER]
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert ("nodes/metrics", "get") in granted
    assert {(r, v) for r in ("pods", "nodes") for v in ("get", "list", "watch")} <= granted
    assert not any(verb in {"create", "update", "patch", "delete", "*"} for _, verb in granted)

    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": _metrics.USER}]
    bindings = [m for m in objects.values() if m["kind"].endswith("Binding")]
    refs = {(b["kind"], b["roleRef"]["kind"], b["roleRef"]["name"], b["metadata"].get("namespace")) for b in bindings}
    assert refs == {
        ("ClusterRoleBinding", "ClusterRole", _metrics.USER, None),
        ("ClusterRoleBinding", "ClusterRole", "system:auth-delegator", None),
        ("RoleBinding", "Role", "extension-apiserver-authentication-reader", "kube-system"),
    }
    assert all(b["subjects"] == subject for b in bindings)


def test_the_service_has_no_selector_and_its_endpoint_slice_names_the_host_under_the_same_port_name() -> None:
    objects = by_kind(_metrics.metrics_server_manifests(LAYOUT))
    service = objects["Service", _metrics.NAME]
    endpoints = objects["EndpointSlice", "metrics-server-host"]
    assert "selector" not in service["spec"]
    (service_port,) = service["spec"]["ports"]
    (endpoint_port,) = endpoints["ports"]
    # The aggregator finds the endpoint port by the Service port's name.
    assert endpoint_port["name"] == service_port["name"]
    assert endpoint_port["port"] == service_port["targetPort"] == LAYOUT.ports.metrics_server
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == _metrics.NAME
    assert endpoints["metadata"]["namespace"] == service["metadata"]["namespace"] == "kube-system"
    assert endpoints["endpoints"] == [{"addresses": [LAYOUT.host_ip], "conditions": {"ready": True}}]


def test_the_api_service_points_at_the_service_port_and_verifies_with_the_ca_bundle() -> None:
    service = by_kind(_metrics.metrics_server_manifests(LAYOUT))["Service", _metrics.NAME]
    api_service = _metrics.api_service(b"-----BEGIN CERTIFICATE-----\n")
    spec = api_service["spec"]
    assert api_service["metadata"]["name"] == f"{spec['version']}.{spec['group']}" == "v1beta1.metrics.k8s.io"
    assert spec["service"] == {"name": _metrics.NAME, "namespace": "kube-system", "port": 443}
    assert spec["service"]["port"] == service["spec"]["ports"][0]["port"]
    assert base64.b64decode(spec["caBundle"]) == b"-----BEGIN CERTIFICATE-----\n"
    assert "insecureSkipTLSVerify" not in spec


def test_metrics_server_may_read_the_request_header_ca_is_the_question_asked_before_it_starts() -> None:
    review = _metrics.startup_access_review()
    assert review["spec"]["user"] == _metrics.USER
    assert review["spec"]["resourceAttributes"] == {
        "namespace": "kube-system",
        "verb": "get",
        "resource": "configmaps",
        "name": "extension-apiserver-authentication",
    }


@pytest.mark.parametrize(
    ("manifest", "path"),
    [
        (
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": "kube-system"}},
            "/api/v1/namespaces/kube-system/services/kube-dns",
        ),
        (
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "a:b"}},
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/a:b",
        ),
        (
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.x.io"}},
            "/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.x.io",
        ),
    ],
)
def test_each_object_the_node_applies_has_its_own_url(manifest: dict[str, Any], path: str) -> None:
    assert _manifest_path(manifest) == path


def test_every_object_the_node_applies_maps_to_a_url_of_its_scope() -> None:
    manifests = [*_metrics.metrics_server_manifests(LAYOUT), _metrics.api_service(b"")]
    for manifest in manifests:
        scoped = "/namespaces/kube-system/" in _manifest_path(manifest)
        assert scoped == ("namespace" in manifest["metadata"]), manifest["kind"]
