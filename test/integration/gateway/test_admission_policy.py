"""What llmaz-gateway's ServiceAccount may write, on the real API server: its generated roles and
config/gateway's admission policy let it write its own EndpointSlices, Lease and a Playground's last request time,
and nothing else of those kinds, though RBAC alone grants the verbs on every object.

The ServiceAccount is named as installs name it, `llmaz-gateway`, in the test's namespace; the policy and its
binding are config/gateway's, named per test (as config/default's `llmaz-` prefix names them, plus the namespace).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from llmaz_dev.envtest import Cluster
from llmaz_dev.envtest._rest import ApiError, RestClient
from llmaz_dev.testing.waiting import eventually_sync

from .conftest import REPO, gateway_rbac

ACCOUNT = "llmaz-gateway"
OWN_LEASE = "llmaz-gateway-autoscaler"
MANAGER_LEASE = "fbb36db9.llmaz.io"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
ACTIVATOR = "llmaz-gateway.llmaz.io"
MERGE_PATCH = "application/merge-patch+json"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
SLICE_DENIED = "llmaz-gateway may write only the EndpointSlices it manages"
PLAYGROUND_DENIED = "llmaz-gateway may change only the llmaz.io/last-request-time annotation of a Playground"
LEASE_DENIED = "llmaz-gateway may write only its own Lease"


@dataclass
class Access:
    admin: RestClient
    gateway: RestClient
    namespace: str

    def slices(self, name: str = "") -> str:
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        return f"{path}/{name}" if name else path

    def playground(self, name: str) -> str:
        return f"/apis/inference.llmaz.io/v1alpha1/namespaces/{self.namespace}/playgrounds/{name}"

    def leases(self, name: str = "") -> str:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        return f"{path}/{name}" if name else path


def _policy(namespace: str) -> list[tuple[str, dict[str, Any]]]:
    documents = list(yaml.safe_load_all((REPO / "config" / "gateway" / "admission_policy.yaml").read_text()))
    (policy,) = [d for d in documents if d and d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in documents if d and d["kind"] == "ValidatingAdmissionPolicyBinding"]
    name = f"llmaz-gateway-writes-{namespace}"
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    return [
        (f"{ADMISSION}/validatingadmissionpolicies", policy),
        (f"{ADMISSION}/validatingadmissionpolicybindings", binding),
    ]


def _slice(name: str, managed_by: str | None = ACTIVATOR) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": "p-lb", **({MANAGED_BY: managed_by} if managed_by else {})}
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": labels},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.1"]}],
        "ports": [{"name": "http", "port": 8001, "protocol": "TCP"}],
    }


def _lease(name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": {}}


def _refused(call: Any, status: int, text: str = "") -> None:
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.status == status, err.value.body
    assert text in err.value.body


def _policy_in_force(access: Access) -> bool:
    """Whether the API server enforces the policy yet (it loads policies asynchronously): an unlabelled slice is
    refused. One admitted before is removed."""
    probe = _slice("", managed_by=None)
    probe["metadata"] = {"generateName": "probe-", "labels": probe["metadata"]["labels"]}
    try:
        created = access.gateway.request("POST", access.slices(), probe)
    except ApiError as err:
        if err.status == 403 and SLICE_DENIED in err.body:
            return True
        raise
    access.admin.request("DELETE", access.slices(created["metadata"]["name"]))
    return False


@pytest.fixture
def access(control_plane: Cluster, namespace: str) -> Iterator[Access]:
    admin = control_plane.admin_client()
    created = [*gateway_rbac(namespace, ACCOUNT), *_policy(namespace)]
    for collection, obj in created:
        admin.request("POST", collection, obj)
    token = control_plane.service_account_token(namespace, ACCOUNT)
    access = Access(admin, RestClient(control_plane.server, control_plane.ca_file, token=token), namespace)
    try:
        eventually_sync(lambda: _policy_in_force(access), within=30, what="the admission policy enforced")
        yield access
    finally:
        for collection, obj in reversed(created):
            admin.request("DELETE", f"{collection}/{obj['metadata']['name']}")


def _updated(client: RestClient, path: str, change: dict[str, Any], labels: dict[str, str] | None = None) -> Any:
    """An update as the activator writes one: the live object read, changed, and put back."""
    live = client.request("GET", path)
    live.update(change)
    live["metadata"]["labels"] = {**live["metadata"].get("labels", {}), **(labels or {})}
    return client.request("PUT", path, live)


def test_the_gateway_writes_its_own_endpoint_slices_and_no_other(access: Access) -> None:
    gateway, admin = access.gateway, access.admin
    gateway.request("POST", access.slices(), _slice("p-lb-activator"))
    _updated(gateway, access.slices("p-lb-activator"), {"endpoints": [{"addresses": ["192.0.2.2"]}]})
    gateway.request("DELETE", access.slices("p-lb-activator"))

    _refused(lambda: gateway.request("POST", access.slices(), _slice("mine", managed_by=None)), 403, SLICE_DENIED)
    admin.request("POST", access.slices(), _slice("p-lb-abcde", managed_by="endpointslice-controller.k8s.io"))
    other = access.slices("p-lb-abcde")
    retarget = {"endpoints": [{"addresses": ["192.0.2.9"]}]}
    _refused(lambda: _updated(gateway, other, retarget), 403, SLICE_DENIED)
    _refused(lambda: _updated(gateway, other, retarget, {MANAGED_BY: ACTIVATOR}), 403, SLICE_DENIED)
    _refused(lambda: gateway.request("DELETE", other), 403, SLICE_DENIED)
    assert [e["addresses"] for e in admin.request("GET", other)["endpoints"]] == [["192.0.2.1"]]


def test_the_gateway_changes_a_playgrounds_last_request_time_and_replicas_only(access: Access) -> None:
    gateway, admin = access.gateway, access.admin
    playground = {
        "apiVersion": "inference.llmaz.io/v1alpha1",
        "kind": "Playground",
        "metadata": {"name": "p", "labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {"replicas": 1, "modelClaim": {"modelName": "m"}},
    }
    admin.request("POST", f"/apis/inference.llmaz.io/v1alpha1/namespaces/{access.namespace}/playgrounds", playground)
    path = access.playground("p")
    touch = {"metadata": {"annotations": {"llmaz.io/last-request-time": "2026-11-28T13:00:00Z"}}}
    gateway.request("PATCH", path, touch, content_type=MERGE_PATCH)
    gateway.request("PATCH", f"{path}/scale", {"spec": {"replicas": 0}}, content_type=MERGE_PATCH)

    for patch in (
        {"spec": {"replicas": 3}},
        {"spec": {"modelClaim": {"modelName": "other"}}},
        {"metadata": {"annotations": {"note": "y"}}},
        {"metadata": {"annotations": {"llmaz.io/scale-to-zero-after": "10s"}}},
        {"metadata": {"labels": {"team": "b"}}},
        {"metadata": {"finalizers": ["example.com/hold"]}},
    ):
        _refused(lambda p=patch: gateway.request("PATCH", path, p, content_type=MERGE_PATCH), 403, PLAYGROUND_DENIED)
    stored = admin.request("GET", path)
    assert stored["spec"]["replicas"] == 0
    assert stored["spec"]["modelClaim"] == {"modelName": "m"}
    assert stored["metadata"]["labels"] == {"team": "a"}
    assert stored["metadata"]["annotations"] == {"note": "x", **touch["metadata"]["annotations"]}
    assert "finalizers" not in stored["metadata"]


def test_the_gateway_holds_its_own_lease_and_cannot_touch_the_managers(access: Access) -> None:
    gateway, admin = access.gateway, access.admin
    gateway.request("POST", access.leases(), _lease(OWN_LEASE))
    own = gateway.request("GET", access.leases(OWN_LEASE))
    own["spec"]["holderIdentity"] = "gateway-0"
    gateway.request("PUT", access.leases(OWN_LEASE), own)

    _refused(lambda: gateway.request("POST", access.leases(), _lease(MANAGER_LEASE)), 403, LEASE_DENIED)
    admin.request("POST", access.leases(), _lease(MANAGER_LEASE))
    manager = admin.request("GET", access.leases(MANAGER_LEASE))
    manager["spec"]["holderIdentity"] = "gateway-0"
    _refused(lambda: gateway.request("GET", access.leases(MANAGER_LEASE)), 403)  # RBAC: its own Lease only
    _refused(lambda: gateway.request("PUT", access.leases(MANAGER_LEASE), manager), 403)
    assert "holderIdentity" not in admin.request("GET", access.leases(MANAGER_LEASE))["spec"]
