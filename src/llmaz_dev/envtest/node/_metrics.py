"""metrics-server on the node, and the API aggregation kube-apiserver reaches it through: certificates, flags and
objects, rendered from a `NodeLayout`.

metrics-server (its Go module, pinned in hack/cluster/metrics-server, built by `make node-bins`) runs on the host
like CoreDNS: it listens on the bridge address, behind the selector-less Service `kube-system/metrics-server`
whose EndpointSlice names the host, and serves the resource metrics API as the APIService `v1beta1.metrics.k8s.io`
(what `kubectl top` and the HPA controller read). It scrapes kubelet's `/metrics/resource` every 10 s, the least
it accepts, so an HPA sees a new load within about 10-20 s.

Who trusts whom:
- kube-apiserver runs with the aggregator's flags (`aggregator_args`): it forwards requests to metrics-server as
  `front-proxy-client`, with a client certificate of a CA of its own (the request-header CA), and routes to the
  EndpointSlice's address rather than the Service's ClusterIP. It publishes that CA in the
  `kube-system/extension-apiserver-authentication` ConfigMap, where metrics-server reads it.
- metrics-server is the user `system:metrics-server` (a client certificate of the cluster CA) with metrics-server's
  own RBAC: its ClusterRole (nodes/metrics; nodes and pods get/list/watch), `system:auth-delegator` (it asks the
  API server to authenticate and authorize its callers) and `extension-apiserver-authentication-reader` in
  kube-system.
- Its serving certificate names `metrics-server.kube-system.svc` and the bridge address, signed by the cluster CA,
  which is the APIService's caBundle; kubelet serves with a certificate of the same CA (`kubelet_serving_pair`),
  so metrics-server verifies kubelet too: nothing here skips TLS verification.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llmaz.certs import pki
from llmaz_dev.envtest._pki import write_key_pair
from llmaz_dev.envtest.node._layout import NodeLayout

NAME = "metrics-server"
NAMESPACE = "kube-system"
USER = "system:metrics-server"
FRONT_PROXY_USER = "front-proxy-client"
GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
API_SERVICE = f"{VERSION}.{GROUP}"
SERVICE_PORT = 443
METRIC_RESOLUTION = "10s"
# metrics-server wants a kubelet request to time out within 90 % of the resolution (its default is 10 s).
KUBELET_REQUEST_TIMEOUT = "5s"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_RBAC = "rbac.authorization.k8s.io"
_MANAGED_BY = "llmaz-envtest"


@dataclass(frozen=True)
class MetricsPKI:
    """File paths of every certificate and key `write_pki` generates."""

    front_proxy_ca: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path


def write_pki(directory: Path, ca: pki.KeyPair, layout: NodeLayout) -> MetricsPKI:
    """The request-header CA and kube-apiserver's front-proxy client certificate, metrics-server's serving
    certificate and its client certificate (both of the cluster CA `ca`), into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = MetricsPKI(
        front_proxy_ca=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
        serving_cert=directory / "metrics-server.crt",
        serving_key=directory / "metrics-server.key",
        client_cert=directory / "metrics-server-client.crt",
        client_key=directory / "metrics-server-client.key",
    )
    now = datetime.now(UTC)
    front_proxy_ca = pki.new_ca(now, "llmaz-envtest-front-proxy-ca", new_key=pki.ec_key)
    front_proxy = pki.new_client_cert(front_proxy_ca, now, FRONT_PROXY_USER, new_key=pki.ec_key)
    serving = pki.new_serving_cert(ca, now, service_dns_names(), [layout.host_ip], new_key=pki.ec_key)
    client = pki.new_client_cert(ca, now, USER, new_key=pki.ec_key)
    paths.front_proxy_ca.write_bytes(front_proxy_ca.cert_pem)
    write_key_pair(front_proxy, paths.front_proxy_client_cert, paths.front_proxy_client_key)
    write_key_pair(serving, paths.serving_cert, paths.serving_key)
    write_key_pair(client, paths.client_cert, paths.client_key)
    return paths


def kubelet_serving_pair(ca: pki.KeyPair, layout: NodeLayout) -> pki.KeyPair:
    """kubelet's serving certificate: the node's name and its InternalIP (the address metrics-server dials)."""
    return pki.new_serving_cert(ca, datetime.now(UTC), [layout.node_name], [layout.host_ip], new_key=pki.ec_key)


def service_dns_names() -> list[str]:
    """The names kube-apiserver verifies metrics-server's certificate against (`<service>.<namespace>.svc`)."""
    return [f"{NAME}.{NAMESPACE}.svc", f"{NAME}.{NAMESPACE}.svc.cluster.local"]


def aggregator_args(paths: MetricsPKI) -> list[str]:
    """kube-apiserver's flags for aggregated APIs: how it authenticates to them and how it reaches them."""
    return [
        f"--requestheader-client-ca-file={paths.front_proxy_ca}",
        f"--requestheader-allowed-names={FRONT_PROXY_USER}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={paths.front_proxy_client_cert}",
        f"--proxy-client-key-file={paths.front_proxy_client_key}",
        # To the EndpointSlice's address (the host), not through the Service's ClusterIP.
        "--enable-aggregator-routing=true",
    ]


def metrics_server_args(layout: NodeLayout, paths: MetricsPKI, kubeconfig: Path, ca_file: Path) -> list[str]:
    """metrics-server's command line; `kubeconfig` authenticates as `USER`, `ca_file` verifies kubelet."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={layout.host_ip}",
        f"--secure-port={layout.ports.metrics_server}",
        f"--tls-cert-file={paths.serving_cert}",
        f"--tls-private-key-file={paths.serving_key}",
        f"--kubelet-certificate-authority={ca_file}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        f"--metric-resolution={METRIC_RESOLUTION}",
        f"--kubelet-request-timeout={KUBELET_REQUEST_TIMEOUT}",
        "--v=1",
    ]


def metrics_server_manifests(layout: NodeLayout) -> list[dict[str, Any]]:
    """metrics-server's RBAC (applied before it starts: it reads the request-header CA at start), its Service and
    the EndpointSlice naming the host's address."""
    labels = {"k8s-app": NAME}
    user = [{"apiGroup": _RBAC, "kind": "User", "name": USER}]
    port = {"name": "https", "protocol": "TCP"}
    cluster_role = {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USER, "labels": labels},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
        ],
    }
    return [
        cluster_role,
        _binding("ClusterRoleBinding", USER, None, "ClusterRole", USER, user),
        _binding(
            "ClusterRoleBinding", f"{NAME}:system:auth-delegator", None, "ClusterRole", "system:auth-delegator", user
        ),
        _binding(
            "RoleBinding", f"{NAME}-auth-reader", NAMESPACE, "Role", "extension-apiserver-authentication-reader", user
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {"ports": [{**port, "port": SERVICE_PORT, "targetPort": layout.ports.metrics_server}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{NAME}-host",
                "namespace": NAMESPACE,
                "labels": {"kubernetes.io/service-name": NAME, "endpointslice.kubernetes.io/managed-by": _MANAGED_BY},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [layout.host_ip], "conditions": {"ready": True}}],
            "ports": [{**port, "port": layout.ports.metrics_server}],
        },
    ]


def api_service(ca_bundle: bytes) -> dict[str, Any]:
    """The APIService `v1beta1.metrics.k8s.io`, verified with `ca_bundle`. Registered only once metrics-server
    answers: an unavailable aggregated API fails every client's discovery, and holds up namespace deletion."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": API_SERVICE, "labels": {"k8s-app": NAME}},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"name": NAME, "namespace": NAMESPACE, "port": SERVICE_PORT},
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }


def startup_access_review() -> dict[str, Any]:
    """A SubjectAccessReview: may metrics-server read the request-header CA's ConfigMap, as it does at start?
    (kube-apiserver's RBAC cache follows a new RoleBinding by a moment.)"""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": USER,
            "resourceAttributes": {
                "namespace": NAMESPACE,
                "verb": "get",
                "resource": "configmaps",
                "name": "extension-apiserver-authentication",
            },
        },
    }


def _binding(
    kind: str, name: str, namespace: str | None, role_kind: str, role: str, subjects: list[dict[str, str]]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"k8s-app": NAME}}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": _RBAC, "kind": role_kind, "name": role},
        "subjects": subjects,
    }
