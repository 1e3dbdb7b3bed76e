"""llmaz installed the way users install it, on a control plane of its own, and the real `llmaz-manager` binary
running as the installed ServiceAccount with nothing but the generated RBAC.

The control plane is separate from the session one because config/default registers cluster-wide webhooks,
and it enforces owner-reference permissions (OwnerReferencesPermissionEnforcement, as OpenShift does), the
strictest common admission setup for a controller's RBAC. Without a kubelet the Deployment never runs: the
manager runs here as a process with the Deployment's command and arguments, plus local ports and a webhook
registration by URL (config/local), authenticated with a TokenRequest token of its ServiceAccount.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from llmaz.certs import ensure_self_signed
from llmaz_dev.envtest import ControlPlane
from llmaz_dev.envtest._pki import ControlPlanePKI
from llmaz_dev.envtest._process import ManagedProcess, free_loopback_ports
from llmaz_dev.envtest._rest import RestClient
from llmaz_dev.testing.waiting import eventually_sync as eventually

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "llmaz-system"
SERVICE_ACCOUNT = "llmaz-controller-manager"
T = TypeVar("T")


class StrictControlPlane(ControlPlane):
    def _apiserver_args(self, pki: ControlPlanePKI) -> list[str]:
        return [*super()._apiserver_args(pki), "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"]


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="package")
def cluster() -> Iterator[ControlPlane]:
    """A fresh control plane: only the LeaderWorkerSet CRD (a prerequisite of llmaz) is installed."""
    with StrictControlPlane() as plane:
        yield plane


@dataclass(frozen=True)
class Install:
    dry_run_output: str
    apply_output: str


@pytest.fixture(scope="package")
def install(cluster: ControlPlane) -> Install:
    """The documented install: CRDs, wait until Established, then config/default (previewed with a server
    dry run, which needs the namespace to exist already)."""
    cluster.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "crd"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "config/crd/bases"))
    cluster.kubectl("create", "namespace", NAMESPACE)
    default = str(REPO / "config" / "default")
    dry_run = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", default)
    return Install(dry_run, cluster.kubectl("apply", "--server-side", "-k", default))


@dataclass(frozen=True)
class RunningManager:
    process: ManagedProcess
    probe_port: int
    metrics_port: int
    webhook_port: int
    kubeconfig: Path

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")


def _register_webhooks_by_url(cluster: ControlPlane, port: int) -> None:
    """Replace config/default's Service-based webhook configurations with config/local's URL-based ones."""
    built = cluster.kubectl("kustomize", str(REPO / "config" / "local" / "webhook"))
    local = [d for d in documents(built) if d["kind"].endswith("WebhookConfiguration")]
    for doc in local:
        cluster.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"])
    text = yaml.safe_dump_all(local).replace("https://127.0.0.1:9443/", f"https://127.0.0.1:{port}/")
    cluster.kubectl("apply", "--server-side", "-f", "-", input=text)


def _deployment_container(cluster: ControlPlane) -> dict[str, Any]:
    deployment = cluster.admin_client().request(
        "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/llmaz-controller-manager"
    )
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.fixture(scope="package")
def manager(
    cluster: ControlPlane, install: Install, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningManager]:
    work = tmp_path_factory.mktemp("manager")
    probe, metrics, webhook = free_loopback_ports(3)
    _register_webhooks_by_url(cluster, webhook)
    token = cluster.service_account_token(NAMESPACE, SERVICE_ACCOUNT)
    kubeconfig = cluster.write_kubeconfig(work / "kubeconfig", {"token": token})
    ensure_self_signed(work / "metrics-certs", ["localhost"], ["127.0.0.1"])
    container = _deployment_container(cluster)
    executable = Path(sys.executable).with_name(container["command"][0])  # the installed console script
    local = [  # later flags win: only addresses, certificate locations and credentials differ from the pod
        f"--health-probe-bind-address=127.0.0.1:{probe}",
        f"--metrics-bind-address=127.0.0.1:{metrics}",
        f"--metrics-cert-dir={work / 'metrics-certs'}",
        "--webhook-bind-host=127.0.0.1",
        f"--webhook-port={webhook}",
        "--webhook-cert-ip-addresses=127.0.0.1",
        f"--webhook-cert-dir={work / 'webhook-certs'}",
        f"--kubeconfig={kubeconfig}",
    ]
    process = ManagedProcess("llmaz-manager", [str(executable), *container["args"], *local], work / "manager.log")
    process.start()
    running = RunningManager(process, probe, metrics, webhook, kubeconfig)
    try:
        eventually(lambda: _ready(running), within=60, what="llmaz-manager /readyz")
        yield running
    finally:
        process.stop()


def _ready(manager: RunningManager) -> bool:
    if manager.process.exit_code() is not None:
        raise RuntimeError(f"llmaz-manager exited ({manager.process.exit_code()}):\n{manager.process.log_tail()}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{manager.probe_port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def as_token(cluster: ControlPlane, token: str) -> RestClient:
    return RestClient(cluster.server, cluster.ca_file, token=token)
