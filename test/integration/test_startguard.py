"""The real `llmaz-manager` and its start-up guard on a real API server: a Lease held by a process that is not one of
ours and renewed now refuses the start with one line; a stale one, or a Go llmaz Deployment scaled to 0, does not.

Each test gives the manager a namespace of its own (`--namespace`), where its Lease would be; the guard's verdict
shows as the process exiting 1 with `manager refused to start`, or as its probe server answering (servers start
only after the guard has passed).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from llmaz.runtime.timestamp import micro_time
from llmaz_dev.envtest import ControlPlane
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.testing.waiting import eventually_sync as eventually

LEASE = "fbb36db9.llmaz.io"


def create_lease(cluster: ControlPlane, namespace: str, holder: str, renewed_ago: float) -> None:
    renewed = micro_time(datetime.now(UTC) - timedelta(seconds=renewed_ago))
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": renewed, "renewTime": renewed},
    }
    cluster.admin_client().request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", lease)


def create_go_pod(cluster: ControlPlane, namespace: str, name: str) -> None:
    """A Go llmaz manager's pod object (the control plane runs no pod: it stays Pending, which is enough to be seen).
    No controller creates the namespace's `default` ServiceAccount here, and admission wants it: it is made first."""
    client = cluster.admin_client()
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    client.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "manager", "image": "inftyai/llmaz:v0.1.4", "command": ["/manager"]}]},
    }
    client.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def create_go_deployment(cluster: ControlPlane, namespace: str, replicas: int) -> None:
    labels = {"control-plane": "controller-manager"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llmaz-controller-manager", "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "manager", "image": "inftyai/llmaz:v0.1.4", "command": ["/manager"]}]},
            },
        },
    }
    cluster.admin_client().request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)


def start_manager(cluster: ControlPlane, namespace: str, work: Path, *flags: str) -> tuple[ManagedProcess, int]:
    (probe,) = free_loopback_ports(1)
    argv = [
        str(Path(sys.executable).with_name("llmaz-manager")),
        f"--namespace={namespace}",
        "--leader-elect",
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        "--metrics-bind-address=0",
        "--log-format=json",
        f"--kubeconfig={cluster.kubeconfig}",
        *flags,
    ]
    process = ManagedProcess("llmaz-manager", argv, work / "manager.log")
    process.start()
    return process, probe


def log_lines(process: ManagedProcess) -> list[dict[str, Any]]:
    text = process.log_path.read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def refused(process: ManagedProcess) -> dict[str, Any]:
    eventually(lambda: process.exit_code() is not None, within=30, what="llmaz-manager to exit")
    assert process.exit_code() == 1
    (line,) = [line for line in log_lines(process) if line["event"] == "manager refused to start"]
    assert "exception" not in line  # one line, no traceback
    return line


def serves_probes(process: ManagedProcess, port: int) -> bool:
    if process.exit_code() is not None:
        raise AssertionError(f"llmaz-manager exited ({process.exit_code()}):\n{process.log_tail()}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENABLE_WEBHOOKS", "false")
    monkeypatch.delenv("LLMAZ_ALLOW_OTHER_MANAGER", raising=False)
    return tmp_path


def test_a_lease_renewed_now_by_a_holder_that_is_not_ours_refuses_the_start(
    control_plane: ControlPlane, namespace: str, work: Path
) -> None:
    create_go_pod(control_plane, namespace, "llmaz-go-xyz")
    create_lease(control_plane, namespace, "llmaz-go-xyz_4c1d", renewed_ago=0)
    process, _ = start_manager(control_plane, namespace, work)
    try:
        line = refused(process)
    finally:
        process.stop()
    assert line["error"].startswith(
        f"another llmaz manager is running: Lease {namespace}/{LEASE} held by llmaz-go-xyz_4c1d "
        "(pod llmaz-go-xyz runs inftyai/llmaz:v0.1.4), renewed "
    )
    assert "--allow-other-manager" in line["error"]


def test_a_go_llmaz_deployment_refuses_the_start_and_allow_other_manager_overrides_it(
    control_plane: ControlPlane, namespace: str, work: Path
) -> None:
    create_go_deployment(control_plane, namespace, replicas=1)
    process, _ = start_manager(control_plane, namespace, work / "refused")
    try:
        line = refused(process)
    finally:
        process.stop()
    assert f"Deployment {namespace}/llmaz-controller-manager (image inftyai/llmaz:v0.1.4, 1 replicas)" in line["error"]

    process, probe = start_manager(control_plane, namespace, work, "--allow-other-manager")
    try:
        eventually(lambda: serves_probes(process, probe), within=30, what="llmaz-manager /healthz")
    finally:
        process.stop()
    warnings = [line for line in log_lines(process) if line["event"].startswith("starting beside another")]
    assert len(warnings) == 1


def test_a_stale_lease_and_a_go_deployment_scaled_to_0_let_the_manager_start(
    control_plane: ControlPlane, namespace: str, work: Path
) -> None:
    create_lease(control_plane, namespace, "llmaz-go-xyz_4c1d", renewed_ago=20)
    create_go_deployment(control_plane, namespace, replicas=0)
    process, probe = start_manager(control_plane, namespace, work)
    try:
        eventually(lambda: serves_probes(process, probe), within=30, what="llmaz-manager /healthz")
    finally:
        process.stop()
    assert not [line for line in log_lines(process) if line["event"] == "manager refused to start"]
