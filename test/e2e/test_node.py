"""The node tier itself, and llmaz installed on it the way users install it: real pods, real Services, real DNS.

These run only on the node tier (`E2E_CLUSTER=node`): pods here really start from the images `make image-build`
made, and every request goes through kube-proxy's rules, CoreDNS and the API server's Service routing.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from llmaz_dev.envtest.node import NodeCluster

from .conftest import REPO
from .managers import DEPLOYMENT, NAMESPACE, DeployedManager, lease_holder
from .support import (
    Environment,
    ModelNames,
    conditions,
    creating_openmodels_steadily,
    eventually,
    http_request,
    open_model,
    pod_ready,
    run_python_pod,
)

pytestmark = pytest.mark.tier("node")
METRICS_SERVICE = "llmaz-controller-manager-metrics-service"
WEBHOOK_SERVICE = "llmaz-webhook-service"


def _manager_pods(e2e: Environment) -> list[dict[str, Any]]:
    pods = e2e.items("pods", NAMESPACE, "control-plane=controller-manager")
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def _cluster_ip(e2e: Environment, name: str, namespace: str) -> str:
    ip: str = e2e.must_get("services", name, namespace)["spec"]["clusterIP"]
    return ip


def test_the_node_is_ready_and_llmaz_runs_from_the_local_image_with_two_ready_replicas(e2e: Environment) -> None:
    assert isinstance(e2e.cluster, NodeCluster)
    node_name = e2e.cluster.node_name
    node = e2e.must_get("nodes", node_name)
    assert conditions(node)["Ready"][0] == "True"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")

    pods = _manager_pods(e2e)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert pod_ready(pod), pod["status"]
        (status,) = pod["status"]["containerStatuses"]
        assert status["image"].startswith("llmaz.local/llmaz:"), status["image"]
        assert status["restartCount"] == 0, status  # liveness never failed
        assert pod["spec"]["nodeName"] == node_name
    print(e2e.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))


def test_admission_goes_through_the_webhook_service_with_the_injected_ca(e2e: Environment, models: ModelNames) -> None:
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = json.loads(
            e2e.kubectl("get", kind, f"llmaz-{kind.split('webhook')[0]}-webhook-configuration", "-o", "json")
        )
        for webhook in configuration["webhooks"]:
            assert webhook["clientConfig"]["service"]["name"] == WEBHOOK_SERVICE, webhook["clientConfig"]
            assert webhook["clientConfig"].get("caBundle"), webhook["name"]

    name = models.new("defaulted")
    e2e.apply([open_model(name)])
    model = e2e.must_get("openmodels", name)
    assert model["spec"].get("ownedBy") == "llmaz", model["spec"]
    assert model["spec"].get("createdAt"), model["spec"]

    with pytest.raises(Exception, match="denied the request"):
        e2e.kubectl(
            "apply",
            "--server-side",
            "-f",
            str(REPO / "config" / "samples" / "invalid" / "playground-min-replicas.yaml"),
        )


def test_metrics_through_the_service_need_a_token_allowed_to_read_them(e2e: Environment, namespace: str) -> None:
    url = f"https://{_cluster_ip(e2e, METRICS_SERVICE, NAMESPACE)}:8443/metrics"
    assert http_request(url)[0] == 401

    stranger = e2e.cluster.service_account_token(namespace, "stranger")
    assert http_request(url, headers={"Authorization": f"Bearer {stranger}"})[0] == 403

    reader = e2e.cluster.service_account_token(namespace, "reader")
    e2e.kubectl(
        "create",
        "clusterrolebinding",
        f"{namespace}-metrics",
        "--clusterrole=llmaz-metrics-reader",
        f"--serviceaccount={namespace}:reader",
    )
    try:

        def scraped() -> bytes | None:
            status, body = http_request(url, headers={"Authorization": f"Bearer {reader}"})
            return body if status == 200 else None

        body = eventually(scraped, what="a 200 from /metrics once the binding exists")
        assert b"controller_runtime_reconcile_total" in body
    finally:
        e2e.kubectl("delete", "clusterrolebinding", f"{namespace}-metrics")


def test_pods_resolve_service_names_and_reach_the_api_server_and_each_other(e2e: Environment, namespace: str) -> None:
    webhook_ip = _cluster_ip(e2e, WEBHOOK_SERVICE, NAMESPACE)
    script = f"""
import socket, ssl, urllib.request
print("kubernetes", socket.gethostbyname("kubernetes.default.svc.cluster.local"))
print("webhook", socket.gethostbyname("{WEBHOOK_SERVICE}.{NAMESPACE}.svc"))
context = ssl.create_default_context(cafile="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
headers = {{"Authorization": "Bearer " + token}}
request = urllib.request.Request("https://kubernetes.default.svc/version", headers=headers)
print("apiserver", urllib.request.urlopen(request, context=context, timeout=10).status)
plain = ssl.create_default_context(); plain.check_hostname = False; plain.verify_mode = ssl.CERT_NONE
try:
    urllib.request.urlopen("https://{WEBHOOK_SERVICE}.{NAMESPACE}.svc/healthz", context=plain, timeout=10)
except urllib.error.HTTPError as error:
    print("webhook-http", error.code)
"""
    log = run_python_pod(e2e, namespace, "probe", script)
    lines = dict(line.split(" ", 1) for line in log.strip().splitlines())
    assert lines["kubernetes"] == "10.96.0.1", log
    assert lines["webhook"] == webhook_ip, log
    assert lines["apiserver"] == "200", log
    assert lines["webhook-http"] == "404", log  # the webhook server answered, through its Service


def test_nothing_a_pod_sends_can_leave_the_machine(e2e: Environment) -> None:
    assert isinstance(e2e.cluster, NodeCluster)
    layout = e2e.cluster.layout
    (conflist,) = layout.cni_conf_dir.glob("*.conflist")
    (bridge,) = json.loads(conflist.read_text())["plugins"]
    assert bridge["ipMasq"] is False
    guard = subprocess.run(["nft", "list", "table", "inet", "llmaz-node"], capture_output=True, text=True, check=True)
    assert f'iifname "{layout.bridge}" oifname != "{layout.bridge}" drop' in guard.stdout, guard.stdout
    nat = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True, check=True).stdout
    # kube-proxy masquerades only packets it marked (hairpin and host-to-Service traffic, all on the bridge).
    masquerades = {line.strip() for line in nat.splitlines() if re.search(r"(?<![-\w])masquerade(?![-\w])", line)}
    assert masquerades <= {"masquerade fully-random"}, masquerades


def test_the_manager_is_never_refused_by_rbac(e2e: Environment) -> None:
    for pod in _manager_pods(e2e):
        log = e2e.kubectl("logs", pod["metadata"]["name"], "-n", NAMESPACE)
        # RBAC's refusal reads `... is forbidden: User "..." cannot <verb> ...`; a 403 for another cause (an Event
        # in a namespace being deleted: `... because it is being terminated`) is not the manager's permissions.
        refused = [line for line in log.splitlines() if "forbidden" in line.lower() and "cannot " in line]
        assert not refused, refused[:5]


@pytest.mark.disruptive
def test_a_rolling_restart_under_a_steady_stream_of_creates_fails_no_admission(
    e2e: Environment, namespace: str
) -> None:
    with creating_openmodels_steadily(e2e, f"roll-{namespace.rsplit('-', 1)[-1]}") as creates:
        e2e.kubectl("rollout", "restart", f"deployment/{DEPLOYMENT}", "-n", NAMESPACE)
        assert isinstance(e2e.manager, DeployedManager)
        e2e.manager.wait_rolled_out()
    creates.assert_none_failed()


@pytest.mark.disruptive
def test_deleting_the_leader_pod_hands_leadership_to_another_replica(e2e: Environment, models: ModelNames) -> None:
    pods = {pod["metadata"]["name"] for pod in _manager_pods(e2e)}
    leader = eventually(
        lambda: (holder := lease_holder(e2e.cluster)) and holder.split("_", 1)[0] in pods and holder,
        what=f"one of {sorted(pods)} to lead",
    )

    e2e.manager.kill(leader)
    # Admission does not wait for the new leader: every replica serves the webhooks.
    e2e.apply([open_model(models.new("during-handover"))])
    new_leader = eventually(
        lambda: (holder := lease_holder(e2e.cluster)) and holder != leader and holder, within=90, what="a new leader"
    )
    # The survivor or the Deployment's replacement for the killed pod: whichever renews first once the lease expires.
    now = {pod["metadata"]["name"] for pod in _manager_pods(e2e)}
    assert new_leader.split("_", 1)[0] in now - {leader.split("_", 1)[0]}, (new_leader, now)
    assert isinstance(e2e.manager, DeployedManager)
    e2e.manager.wait_rolled_out()
