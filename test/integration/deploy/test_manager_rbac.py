"""The installed manager, as its ServiceAccount with only the generated RBAC: the whole Playground flow works,
and requests outside its role are forbidden."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from llmaz_dev.envtest import ControlPlane
from llmaz_dev.envtest._rest import ApiError, RestClient
from llmaz_dev.testing.waiting import eventually_sync as eventually

from .conftest import NAMESPACE, REPO, SERVICE_ACCOUNT, RunningManager, as_token

PLAYGROUND = "qwen2-0--5b-hpa"  # config/samples/hpa.yaml: a Playground with an HPA
INFERENCE = "/apis/inference.llmaz.io/v1alpha1"


def _get(cluster: ControlPlane, path: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.admin_client().request("GET", path)
    return found


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or []}


def _set_lws_available(cluster: ControlPlane, namespace: str) -> None:
    """Play the LeaderWorkerSet controller, which does not run here."""
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets/{PLAYGROUND}"
    lws = _get(cluster, path)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lws["status"] = {
        "replicas": 1,
        "readyReplicas": 1,
        "hpaPodSelector": f"leaderworkerset.sigs.k8s.io/name={PLAYGROUND}",
        "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady", "message": "test",
                        "lastTransitionTime": now}],
    }  # fmt: skip
    cluster.admin_client().request("PUT", f"{path}/status", lws)


def _exists(cluster: ControlPlane, path: str) -> bool:
    try:
        _get(cluster, path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def test_the_playground_flow_works_with_only_the_generated_rbac(cluster: ControlPlane, manager: RunningManager) -> None:
    ns = cluster.create_namespace("flow")
    cluster.kubectl("apply", "-n", ns, "-f", str(REPO / "config" / "samples" / "hpa.yaml"))
    playground = f"{INFERENCE}/namespaces/{ns}/playgrounds/{PLAYGROUND}"
    hpa = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{PLAYGROUND}"

    eventually(lambda: _conditions(_get(cluster, playground)) == {"Progressing": ("True", "Pending")}, what="Pending")
    assert _exists(cluster, f"{INFERENCE}/namespaces/{ns}/services/{PLAYGROUND}")
    eventually(
        lambda: _exists(cluster, f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/{PLAYGROUND}")
    )
    eventually(lambda: _exists(cluster, f"/api/v1/namespaces/{ns}/services/{PLAYGROUND}-lb"))
    assert _exists(cluster, hpa)

    _set_lws_available(cluster, ns)
    eventually(lambda: _conditions(_get(cluster, playground)).get("Available") == ("True", "PlaygroundReady"))

    cluster.kubectl("patch", "-n", ns, "playground", PLAYGROUND, "--type=json",
                    "-p", '[{"op": "remove", "path": "/spec/elasticConfig"}]')  # fmt: skip
    eventually(lambda: not _exists(cluster, hpa), what="the HPA deleted once elasticConfig is gone")

    events = eventually(lambda: _get(cluster, f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"])
    assert {e["reportingController"] for e in events} >= {"playground-controller"}
    lease = _get(cluster, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/fbb36db9.llmaz.io")
    assert lease["spec"]["holderIdentity"]
    assert "forbidden" not in manager.log().lower(), manager.log()


def test_a_bad_sample_is_rejected_by_the_webhook_with_its_message(
    cluster: ControlPlane, manager: RunningManager
) -> None:
    assert cluster.kubectl_path is not None
    bad = REPO / "config" / "samples" / "invalid" / "playground-min-replicas.yaml"
    result = subprocess.run(
        [str(cluster.kubectl_path), f"--kubeconfig={cluster.kubeconfig}", "apply", "-n", "default", "-f", str(bad)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert 'admission webhook "vplayground.kb.io" denied the request' in result.stderr
    assert "minReplicas must be less than maxReplicas" in result.stderr


@pytest.fixture(scope="module")
def as_manager(cluster: ControlPlane, manager: RunningManager) -> RestClient:
    return as_token(cluster, cluster.service_account_token(NAMESPACE, SERVICE_ACCOUNT))


def _status(client: RestClient, method: str, path: str, body: Any = None) -> int:
    try:
        client.request(method, path, body)
    except ApiError as err:
        return err.status
    return 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/secrets"),
        ("GET", "/api/v1/namespaces/kube-system/secrets/anything"),
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps"),
        ("DELETE", "/api/v1/namespaces/default/pods/anything"),
        ("POST", f"{INFERENCE}/namespaces/default/playgrounds"),
        ("DELETE", "/apis/llmaz.io/v1alpha1/openmodels/anything"),
        ("PUT", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/anything"),
        ("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/fbb36db9.llmaz.io"),
    ],
)
def test_the_manager_identity_is_forbidden_outside_its_role(as_manager: RestClient, method: str, path: str) -> None:
    body = (
        {"apiVersion": "v1", "kind": "Probe", "metadata": {"name": "anything"}} if method in ("POST", "PUT") else None
    )
    assert _status(as_manager, method, path, body) == 403


def test_the_manager_identity_reads_what_it_watches(as_manager: RestClient) -> None:
    # The one ConfigMap it may read, listed the way its informer lists it: by name.
    config_maps = f"/api/v1/namespaces/{NAMESPACE}/configmaps?fieldSelector=metadata.name%3Dllmaz-global-config"
    assert _status(as_manager, "GET", config_maps) == 200
    assert _status(as_manager, "GET", f"{INFERENCE}/playgrounds") == 200
    # Model pods, listed the way its informer lists them: by label selector, cluster-wide.
    model_pods = "/api/v1/pods?labelSelector=leaderworkerset.sigs.k8s.io%2Fname%2Cllmaz.io%2Fmodel-name"
    assert _status(as_manager, "GET", model_pods) == 200
    assert _status(as_manager, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/llmaz-webhook-server-cert") == 200


def test_the_start_up_guard_reads_its_signs_with_the_generated_rbac_and_lets_the_installed_manager_start(
    as_manager: RestClient, manager: RunningManager
) -> None:
    # The manager runs (the fixture waited for /readyz) beside config/default's own Deployment, which runs
    # `llmaz-manager`: the guard judged it ours, and could read every sign.
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/fbb36db9.llmaz.io"
    assert _status(as_manager, "GET", lease) == 200
    assert _status(as_manager, "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments") == 200
    assert _status(as_manager, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods/not-there") == 404
    assert "start-up guard: cannot read" not in manager.log()
    assert "refused to start" not in manager.log()


def _controller_uid(cluster: ControlPlane, path: str) -> str:
    if not _exists(cluster, path):
        return ""
    refs = _get(cluster, path)["metadata"].get("ownerReferences") or []
    return next(str(ref["uid"]) for ref in refs if ref.get("controller"))


def _controlled_by(cluster: ControlPlane, path: str, uid: str) -> Callable[[], bool]:
    return lambda: _controller_uid(cluster, path) == uid


def test_a_recreated_service_takes_over_its_leftover_workload_with_only_the_generated_rbac(
    cluster: ControlPlane, manager: RunningManager
) -> None:
    """No garbage collector runs here, so deleting a Service leaves its LeaderWorkerSet and `-lb` Service behind
    (as a slow collector would); re-pointing their owner references needs `delete` on them under strict admission."""
    ns = cluster.create_namespace("takeover")
    sample = str(REPO / "config" / "samples" / "multi-host-service.yaml")
    name = "llama3-405b-instruct"
    service = f"{INFERENCE}/namespaces/{ns}/services/{name}"
    owned = [f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/{name}",
             f"/api/v1/namespaces/{ns}/services/{name}-lb"]  # fmt: skip
    cluster.kubectl("apply", "-n", ns, "-f", sample)
    first = _get(cluster, service)["metadata"]["uid"]
    for path in owned:
        eventually(_controlled_by(cluster, path, first), what=f"{path} owned")

    cluster.kubectl("delete", "-n", ns, "services.inference.llmaz.io", name)
    cluster.kubectl("apply", "-n", ns, "-f", sample)
    second = _get(cluster, service)["metadata"]["uid"]
    for path in owned:
        eventually(_controlled_by(cluster, path, second), what=f"{path} taken over")
    assert "forbidden" not in manager.log().lower(), manager.log()


def test_a_recreated_playground_takes_over_its_leftover_service_and_hpa_with_only_the_generated_rbac(
    cluster: ControlPlane, manager: RunningManager
) -> None:
    """The same for a Playground: its leftover inference Service and HPA are adopted, not a conflict, because
    their controller is an earlier Playground of the same name (builders/ownership.py)."""
    ns = cluster.create_namespace("pg-takeover")
    sample = str(REPO / "config" / "samples" / "hpa.yaml")
    playground = f"{INFERENCE}/namespaces/{ns}/playgrounds/{PLAYGROUND}"
    owned = [f"{INFERENCE}/namespaces/{ns}/services/{PLAYGROUND}",
             f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{PLAYGROUND}"]  # fmt: skip
    cluster.kubectl("apply", "-n", ns, "-f", sample)
    first = _get(cluster, playground)["metadata"]["uid"]
    for path in owned:
        eventually(_controlled_by(cluster, path, first), what=f"{path} owned")

    cluster.kubectl("delete", "-n", ns, "playgrounds.inference.llmaz.io", PLAYGROUND)
    cluster.kubectl("apply", "-n", ns, "-f", sample)
    second = _get(cluster, playground)["metadata"]["uid"]
    for path in owned:
        eventually(_controlled_by(cluster, path, second), what=f"{path} taken over")
    # Progressing alone: other tests of this module serve the same sample model from namespaces created earlier, so
    # this Playground may also say that another namespace owns the model's name (ModelRouted).
    pending = ("True", "Pending")
    eventually(lambda: _conditions(_get(cluster, playground)).get("Progressing") == pending, what="Pending")
    assert "forbidden" not in manager.log().lower(), manager.log()
